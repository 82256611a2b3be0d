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
from typing import Any, ClassVar, cast

import torch
from torch import nn

from anatomy.components.attention import MultiHeadAttention
from anatomy.components.block import TransformerBlock
from anatomy.components.context import AttentionContext, build_context, cache_seen
from anatomy.components.hook_point import HookPoint
from anatomy.components.kv_cache import KVCache
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

    def attention_context(
        self,
        b: int,
        t: int,
        device: torch.device | str | None,
        *,
        memory_len: int | None = None,
        key_padding_mask: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        attn_mask: torch.Tensor | None = None,
        memory_key_padding_mask: torch.Tensor | None = None,
        memory_attention_mask: torch.Tensor | None = None,
        memory_attn_mask: torch.Tensor | None = None,
        is_causal: bool | None = None,
        positions: torch.Tensor | None = None,
        kv_caches: list[Any] | None = None,
        padding_name: str = "key_padding_mask",
        memory_padding_name: str = "memory_key_padding_mask",
        positions_name: str = "positions",
    ) -> AttentionContext:
        """The forward's :class:`AttentionContext`, built once for every block: the caches checked and their
        length read, masks checked and combined (``key_padding_mask (B, S)``, boolean, True = may attend, or a
        model's Hugging Face ``attention_mask`` (B, S) of 0/1, from which the positions are then counted;
        ``attn_mask`` broadcastable to ``(B, H, T, S)``), positions (default ``past + arange(T)``), T5's shared
        bias, and for cross-attention the memory's context (``ctx.cross_ctx``)."""
        if kv_caches is not None and len(kv_caches) != len(self.blocks):
            what = "one (self, cross) pair" if self.cross else "one cache"
            raise ValueError(f"kv_caches must hold {what} per block ({len(self.blocks)}), got {len(kv_caches)}")
        heads = cast(TransformerBlock, self.blocks[0]).attn.n_heads if len(self.blocks) else 1
        past = cache_seen(kv_caches)
        first = None if not kv_caches else (kv_caches[0][0] if self.cross else kv_caches[0])
        ctx = build_context(
            b=b,
            t=t,
            s=past + t,
            heads=heads,
            device=device,
            past=past,
            positions=positions,
            key_padding_mask=key_padding_mask,
            attention_mask=attention_mask,
            attn_mask=attn_mask,
            is_causal=self.default_causal if is_causal is None else is_causal,
            cache_positions=None if first is None else first.positions,
            mask_name="attn_mask",
            padding_name=padding_name,
            positions_name=positions_name,
        )
        if self.position_bias is not None:
            ctx.bias = self.position_bias.score_bias(None, ctx.positions, ctx.key_positions, 1.0)  # (B|1, H, T, S)
        if memory_len is not None:
            ctx.cross_ctx = build_context(
                b=b,
                t=t,
                s=memory_len,
                heads=heads,
                device=device,
                shared_positions=ctx.positions,
                key_padding_mask=memory_key_padding_mask,
                attention_mask=memory_attention_mask,
                attn_mask=memory_attn_mask,
                cross=True,
                padding_name=memory_padding_name,
                mask_name="memory_attn_mask",
            )
        return ctx

    def forward(
        self,
        x: torch.Tensor,
        memory: torch.Tensor | None = None,
        *,
        key_padding_mask: torch.Tensor | None = None,
        attn_mask: torch.Tensor | None = None,
        memory_key_padding_mask: torch.Tensor | None = None,
        memory_attn_mask: torch.Tensor | None = None,
        is_causal: bool | None = None,
        positions: torch.Tensor | None = None,
        kv_caches: list[Any] | None = None,
        need_weights: bool = False,
        hidden_states: list[torch.Tensor] | None = None,
        ctx: AttentionContext | None = None,
    ) -> tuple[torch.Tensor, tuple[Any, ...] | None]:
        """``x: (B, T, D)`` (and ``memory: (B, S, D)`` for blocks with cross-attention) → ``(hidden (B, T, D),
        weights per layer or None)``; a layer's weights are ``(self, cross)`` with cross-attention. A
        ``hidden_states`` list receives each block's input and then the returned output (HF's
        ``output_hidden_states``). ``ctx`` (from :meth:`attention_context`) replaces the mask/position arguments."""
        d_model = cast(TransformerBlock, self.blocks[0]).attn.d_model if len(self.blocks) else x.shape[-1]
        check_hidden("x", x, d_model)
        if self.cross:
            if memory is None:
                raise ValueError("this stack's blocks attend to an encoder memory: give memory (B, S, D)")
            check_hidden("memory", memory, d_model)
        if ctx is None:
            ctx = self.attention_context(
                x.shape[0],
                x.shape[1],
                x.device,
                memory_len=None if memory is None else memory.shape[1],
                key_padding_mask=key_padding_mask,
                attn_mask=attn_mask,
                memory_key_padding_mask=memory_key_padding_mask,
                memory_attn_mask=memory_attn_mask,
                is_causal=is_causal,
                positions=positions,
                kv_caches=kv_caches,
            )
        weights: list[Any] = []
        for i, block in enumerate(self.blocks):
            if hidden_states is not None:
                hidden_states.append(x)
            x, w = block(
                x, memory, kv_cache=None if kv_caches is None else kv_caches[i], need_weights=need_weights, ctx=ctx
            )
            weights.append(w)
        if self.final_norm is not None:
            x = self.final_norm(x)
        x = self.hook_out(x)
        if hidden_states is not None:
            hidden_states.append(x)
        return x, (tuple(weights) if need_weights else None)
