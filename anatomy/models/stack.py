"""``TransformerStack``: the one stack of blocks over hidden states ``(B, T, D)``.

It serves the encoder (bidirectional), the body of decoder-only LMs (``is_causal=True``, one KV cache per block)
and the decoder of encoder-decoder models (blocks with cross-attention to a ``memory``, a ``(self, cross)`` cache
pair per block). The final norm (Pre-Norm models) and a score bias shared by every layer (T5) live here.
``EncoderStack`` (models/encoder.py) and ``DecoderStack`` (models/decoder.py) are its two named forms.

One forward builds one :class:`~anatomy.components.context.AttentionContext`
(:meth:`TransformerStack.attention_context`; a model calls it itself, because its embeddings need the positions
first) and hands it to every block.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, NoReturn, cast

import torch
from torch import nn

from anatomy.components.attention import MultiHeadAttention
from anatomy.components.block import TransformerBlock
from anatomy.components.context import AttentionContext, build_context, cache_seen, first_cache
from anatomy.components.hook_point import HookPoint
from anatomy.components.inputs import Given, refuse_keywords
from anatomy.components.kv_cache import KVCache, StaticKVCache
from anatomy.components.positional.base import PositionalScheme
from anatomy.shapes import check_hidden


class TransformerStack(nn.Module):
    default_causal: ClassVar[bool] = False  # is_causal when a call does not say

    def __init__(
        self,
        *,
        blocks: Sequence[nn.Module],
        final_norm: nn.Module | None = None,
        position_bias: PositionalScheme | None = None,
    ) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(blocks)
        self.final_norm = final_norm
        self.position_bias = position_bias
        self.hook_out = HookPoint()  # (B, T, D), after the final norm

    def attentions(self) -> list[MultiHeadAttention]:
        """Each block's self-attention module."""
        return [cast(TransformerBlock, block).attn for block in self.blocks]

    @property
    def cross(self) -> bool:
        """Whether the blocks attend to an encoder memory."""
        return len(self.blocks) > 0 and getattr(self.blocks[0], "cross_attn", None) is not None

    def new_caches(self, capacity: int | None = None) -> list[Any]:
        """One empty cache per block (a ``(self, cross)`` pair with cross-attention); ``capacity`` (the final
        length, when known) sizes the self-attention buffers once."""
        caches = [KVCache(capacity, window=attn.sliding_window) for attn in self.attentions()]
        return [(c, KVCache()) for c in caches] if self.cross else caches

    def seen(self, kv_caches: list[Any] | None, t: int = 0, name: str = "kv_caches") -> int:
        """Key slots before this call's ``t`` new ones (0 without caches), once the caches (the caller's argument
        ``name``) are checked: one per block. That is the entries the caches saw, or for static caches their fixed
        width less ``t``."""
        if kv_caches is not None and len(kv_caches) != len(self.blocks):
            what = "one (self, cross) pair" if self.cross else "one cache"
            raise ValueError(f"{name} must hold {what} per block ({len(self.blocks)}), got {len(kv_caches)}")
        return cache_seen(kv_caches, t)

    @property
    def heads(self) -> int:
        """Query heads of the blocks' attention (what an attention mask broadcasts to)."""
        return cast(TransformerBlock, self.blocks[0]).attn.n_heads if len(self.blocks) else 1

    def attention_context(
        self,
        b: int,
        t: int,
        device: torch.device | str | None,
        *,
        past: int = 0,
        kv_caches: list[Any] | None = None,
        padding: torch.Tensor | None = None,
        hf_mask: bool = False,
        mask: torch.Tensor | None = None,
        memory_len: int | None = None,
        memory_padding: torch.Tensor | None = None,
        memory_mask: torch.Tensor | None = None,
        is_causal: bool | None = None,
        positions: torch.Tensor | None = None,
    ) -> AttentionContext:
        """The forward's :class:`AttentionContext`, built once for every block from inputs the caller checked under
        its own argument names (``past``: :meth:`seen`; ``padding (B, S)`` boolean, True on real keys, with
        Hugging Face's meaning when ``hf_mask``: positions counted from it, dropped when it hides nothing;
        ``mask`` boolean ``(B|1, H|1, T, S)``; ``positions (B|1, T)``, default ``past + arange(T)``): T5's shared
        bias, and for cross-attention the memory's context (``ctx.cross_ctx``, ``memory_len`` keys)."""
        first = first_cache(kv_caches)
        static = first if isinstance(first, StaticKVCache) else None
        ctx = build_context(
            b=b,
            t=t,
            s=past + t,
            device=device,
            past=past,
            positions=positions,
            padding=padding,
            hf_mask=hf_mask,
            mask=mask,
            is_causal=self.default_causal if is_causal is None else is_causal,
            cache_positions=None if first is None else (first.positions if static is None else static.pos_buf),
            slots=None if static is None else static.slots(t),
        )
        if self.position_bias is not None:
            ctx.bias = self.position_bias.score_bias(None, ctx.positions, ctx.key_positions, 1.0)  # (B|1, H, T, S)
        if memory_len is not None:
            ctx.cross_ctx = build_context(
                b=b,
                t=t,
                s=memory_len,
                device=device,
                shared_positions=ctx.positions,
                padding=memory_padding,
                hf_mask=hf_mask,
                mask=memory_mask,
                cross=True,
            )
        return ctx

    def standalone_context(self, x: torch.Tensor, memory: torch.Tensor | None, given: Given) -> AttentionContext:
        """This stack's context for :func:`~anatomy.components.inputs.attention_inputs` (:meth:`attention_context`
        from the call's own arguments; ``given.kv_cache`` holds one cache per block)."""
        self.check_inputs(x, memory)
        b, t = x.shape[0], x.shape[1]
        kv_caches = given.kv_cache
        past = self.seen(kv_caches, t, "kv_cache")
        mask, padding = given.keys(b, self.heads, t, past + t)
        memory_len = memory_padding = memory_mask = None
        if not self.cross:
            given.refuse_memory(self, "has no cross-attention")
        elif memory is not None:
            memory_len = memory.shape[1]
            memory_mask, memory_padding = given.memory_keys(b, self.heads, t, memory_len)
        ctx = self.attention_context(
            b,
            t,
            x.device,
            past=past,
            kv_caches=kv_caches,
            padding=padding,
            mask=mask,
            memory_len=memory_len,
            memory_padding=memory_padding,
            memory_mask=memory_mask,
            is_causal=given.is_causal,
            positions=given.query_positions(b, t),
        )
        bias = given.bias(b, self.heads, t, past + t)
        if bias is not None:
            ctx.bias = bias if ctx.bias is None else ctx.bias + bias
        return ctx

    def check_inputs(self, x: torch.Tensor, memory: torch.Tensor | None) -> None:
        """``x (B, T, D)`` and, for blocks with cross-attention, ``memory (B, S, D)``, at the blocks' width."""
        d_model = cast(TransformerBlock, self.blocks[0]).attn.d_model if len(self.blocks) else x.shape[-1]
        check_hidden("x", x, d_model)
        if self.cross:
            if memory is None:
                raise ValueError("this stack's blocks attend to an encoder memory: give memory (B, S, D)")
            check_hidden("memory", memory, d_model)

    def forward(
        self,
        x: torch.Tensor,
        memory: torch.Tensor | None = None,
        ctx: AttentionContext | None = None,
        *,
        kv_caches: list[Any] | None = None,
        need_weights: bool = False,
        hidden_states: list[torch.Tensor] | None = None,
        **removed: NoReturn,
    ) -> tuple[torch.Tensor, tuple[Any, ...] | None]:
        """``x: (B, T, D)`` (and ``memory: (B, S, D)`` for blocks with cross-attention) → ``(hidden (B, T, D),
        weights per layer or None)``; a layer's weights are ``(self, cross)`` with cross-attention. A
        ``hidden_states`` list receives each block's input and then the returned output (HF's
        ``output_hidden_states``). ``ctx`` is the forward's context (a model's, from :meth:`attention_context`, or
        ``attention_inputs(stack, x, memory, mask=..., kv_cache=kv_caches)`` for a call on its own); ``None`` is
        the plain call: no mask, the stack's causal default."""
        if removed:
            form = (
                ("stack(x, memory, {ctx})", "stack, x, memory") if self.cross else ("stack(x, ctx={ctx})", "stack, x")
            )
            refuse_keywords(self, *form, removed)
        if isinstance(memory, AttentionContext):
            raise TypeError(
                f"{type(self).__name__}'s second argument is the encoder memory; give the context as ctx: "
                "stack(x, ctx=attention_inputs(stack, x, ...))"
            )
        if ctx is None:
            self.seen(kv_caches)  # the count checked under this call's name
            ctx = self.standalone_context(x, memory, Given(kv_cache=kv_caches))
        else:
            self.check_inputs(x, memory)
        weights: list[Any] = []
        for i, block in enumerate(self.blocks):
            if hidden_states is not None:
                hidden_states.append(x)
            x, w = block(
                x, memory, ctx, kv_cache=None if kv_caches is None else kv_caches[i], need_weights=need_weights
            )
            weights.append(w)
        if self.final_norm is not None:
            x = self.final_norm(x)
        x = self.hook_out(x)
        if hidden_states is not None:
            hidden_states.append(x)
        return x, (tuple(weights) if need_weights else None)
