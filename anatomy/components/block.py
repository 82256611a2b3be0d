"""Transformer blocks: the post's §5 table as modules.

``EncoderBlock``: self-attention then FFN, each wrapped in Add & Norm. With ``is_causal=True`` it is also the
block of decoder-only language models (GPT-2, Llama). ``DecoderBlock``: masked self-attention, cross-attention
to the encoder memory, FFN (Vaswani et al. 2017, Fig. 1 right).

Both are forms of one ``TransformerBlock`` (cross-attention off or on). Blocks receive their parts (dependency
injection): they never read a config. ``EncoderBlock.build(...)`` and ``DecoderBlock.build(...)`` assemble the
usual parts from explicit keyword arguments through the part builders of models/build.py (``build_block``).
Hook points: ``hook_resid_pre`` → ``hook_attn_in`` (what attention sees) → ``hook_attn_out`` →
``hook_resid_mid`` → (``hook_cross_in`` → ``hook_cross_out`` → ``hook_resid_cross``) → ``hook_ffn_in`` →
``hook_ffn_out`` → ``hook_resid_post``. Inside a model every block receives the forward's ``AttentionContext``
(components/context.py) and checks nothing again.

``parallel_residual=True`` (GPT-J, GPT-NeoX; Pre-Norm only): the FFN reads the block's *input*, not the residual
after attention, ``x + attn(norm_1(x)) + ffn(norm_2(x))``; ``hook_resid_mid`` is then ``x + attn(...)``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import torch
from torch import nn

from anatomy.components.add_norm import AddNorm
from anatomy.components.attention import MultiHeadAttention
from anatomy.components.context import AttentionContext
from anatomy.components.hook_point import HookPoint
from anatomy.components.kv_cache import KVCache

BlockCache = KVCache | tuple[KVCache, KVCache] | None  # a block's cache: self-attention's, or (self, cross)


class TransformerBlock(nn.Module):
    """Self-attention, optional cross-attention to a memory, FFN; each sub-layer wrapped in Add & Norm.

    Without ``cross_attn`` it is the encoder block and the block of decoder-only LMs; with it, the decoder block
    of an encoder-decoder model. ``EncoderBlock`` and ``DecoderBlock`` are its two forms with their own
    constructor signatures (and the causal default: off for the first, on for the second)."""

    default_causal: ClassVar[bool] = False  # is_causal when a standalone call does not say
    builds_cross_attention: ClassVar[bool] = False  # whether ``build`` adds cross-attention

    def __init__(
        self,
        *,
        attn: MultiHeadAttention,
        ffn: nn.Module,
        attn_add_norm: AddNorm,
        ffn_add_norm: AddNorm,
        cross_attn: MultiHeadAttention | None = None,
        cross_add_norm: AddNorm | None = None,
        parallel_residual: bool = False,
    ) -> None:
        super().__init__()
        if parallel_residual and (attn_add_norm.placement, ffn_add_norm.placement) != ("pre", "pre"):
            raise ValueError("parallel_residual needs norm_position='pre' (both sub-layers read the block input)")
        if parallel_residual and cross_attn is not None:
            raise ValueError("parallel_residual is for blocks without cross-attention")
        if (cross_attn is None) != (cross_add_norm is None):
            raise ValueError("cross_attn and cross_add_norm come together (both or neither)")
        self.attn_add_norm, self.attn = attn_add_norm, attn
        if cross_add_norm is not None:  # registered before cross_attn: the parameters' order is pinned
            self.cross_add_norm: AddNorm = cross_add_norm
        self.cross_attn: MultiHeadAttention | None = cross_attn
        self.ffn_add_norm, self.ffn = ffn_add_norm, ffn
        self.parallel_residual = parallel_residual
        self.hook_resid_pre = HookPoint()  # (B, T, D), the block's input
        self.hook_attn_in = HookPoint()  # (B, T, D), what self-attention sees (normalised under Pre-Norm)
        self.hook_attn_out = HookPoint()  # (B, T, D)
        self.hook_resid_mid = HookPoint()  # (B, T, D), after self-attention's Add & Norm
        if cross_attn is not None:
            self.hook_cross_in = HookPoint()  # (B, T, D), what cross-attention sees
            self.hook_cross_out = HookPoint()  # (B, T, D)
            self.hook_resid_cross = HookPoint()  # (B, T, D), after cross-attention's Add & Norm
        self.hook_ffn_in = HookPoint()  # (B, T, D)
        self.hook_ffn_out = HookPoint()  # (B, T, D)
        self.hook_resid_post = HookPoint()  # (B, T, D), the block's output

    # ``EncoderBlock.build(d_model=..., n_heads=..., ...)`` / ``DecoderBlock.build(...)``: the usual parts from
    # explicit keyword arguments, made by the part builders of models/build.py (``build_block``), which attaches
    # this classmethod when the package is imported; declared here for readers and type checkers.
    build: ClassVar[Callable[..., TransformerBlock]]

    def standalone_context(
        self,
        x: torch.Tensor,
        memory: torch.Tensor | None,
        *,
        mask: torch.Tensor | None,
        memory_mask: torch.Tensor | None,
        is_causal: bool,
        kv_cache: BlockCache,
        positions: torch.Tensor | None,
        attn_bias: torch.Tensor | None,
    ) -> AttentionContext:
        """The context of a standalone block call, built by the attention modules' ``standalone_context``."""
        self_cache, cross_cache = split_cache(kv_cache)
        ctx = self.attn.standalone_context(
            x, mask=mask, is_causal=is_causal, kv_cache=self_cache, positions=positions, attn_bias=attn_bias
        )
        if self.cross_attn is not None:
            ctx.cross_ctx = self.cross_attn.standalone_context(x, memory, mask=memory_mask, kv_cache=cross_cache)
        return ctx

    def forward(
        self,
        x: torch.Tensor,
        memory: torch.Tensor | None = None,
        *,
        mask: torch.Tensor | None = None,
        memory_mask: torch.Tensor | None = None,
        is_causal: bool | None = None,
        kv_cache: BlockCache = None,
        need_weights: bool = False,
        positions: torch.Tensor | None = None,
        attn_bias: torch.Tensor | None = None,
        ctx: AttentionContext | None = None,
    ) -> tuple[torch.Tensor, Any]:
        """``x: (B, T, D)`` (and, with cross-attention, ``memory: (B, S, D)``) → ``(x, weights)``; weights are
        ``self_weights`` or, with cross-attention, ``(self_weights, cross_weights)``. ``kv_cache`` is a
        ``KVCache`` or a ``(self, cross)`` pair. Inside a stack ``ctx`` replaces the mask/position arguments."""
        cross = self.cross_attn is not None
        if cross and memory is None:
            raise ValueError(f"{type(self).__name__} attends to an encoder memory: give memory (B, S, D)")
        if ctx is None:
            ctx = self.standalone_context(
                x,
                memory,
                mask=mask,
                memory_mask=memory_mask,
                is_causal=self.default_causal if is_causal is None else is_causal,
                kv_cache=kv_cache,
                positions=positions,
                attn_bias=attn_bias,
            )
        self_cache, cross_cache = split_cache(kv_cache)
        x = block_in = self.hook_resid_pre(x)  # (B, T, D)
        h = self.hook_attn_in(self.attn_add_norm.before(x))
        a, weights = self.attn(h, kv_cache=self_cache, need_weights=need_weights, ctx=ctx)
        x = self.hook_resid_mid(self.attn_add_norm.after(x, self.hook_attn_out(a)))  # (B, T, D)
        if self.cross_attn is not None:
            h = self.hook_cross_in(self.cross_add_norm.before(x))
            c, cross_w = self.cross_attn(
                h, context=memory, kv_cache=cross_cache, need_weights=need_weights, ctx=ctx.cross_ctx
            )
            x = self.hook_resid_cross(self.cross_add_norm.after(x, self.hook_cross_out(c)))  # (B, T, D)
            weights = (weights, cross_w)
        h = self.hook_ffn_in(self.ffn_add_norm.before(block_in if self.parallel_residual else x))
        x = self.ffn_add_norm.after(x, self.hook_ffn_out(self.ffn(h)))  # (B, T, D)
        out: torch.Tensor = self.hook_resid_post(x)
        return out, weights


def split_cache(kv_cache: BlockCache) -> tuple[KVCache | None, KVCache | None]:
    """A block's ``kv_cache``: a ``KVCache`` (self-attention only) or a ``(self, cross)`` pair."""
    if isinstance(kv_cache, tuple):
        return kv_cache
    return kv_cache, None


class EncoderBlock(TransformerBlock):
    """Self-attention then FFN (bidirectional by default; ``is_causal=True`` in decoder-only LMs)."""

    def __init__(
        self,
        *,
        attn: MultiHeadAttention,
        ffn: nn.Module,
        attn_add_norm: AddNorm,
        ffn_add_norm: AddNorm,
        parallel_residual: bool = False,
    ) -> None:
        super().__init__(
            attn=attn,
            ffn=ffn,
            attn_add_norm=attn_add_norm,
            ffn_add_norm=ffn_add_norm,
            parallel_residual=parallel_residual,
        )


class DecoderBlock(TransformerBlock):
    """Masked self-attention, cross-attention to the encoder memory, FFN (Vaswani et al. 2017, Fig. 1 right)."""

    default_causal = True
    builds_cross_attention = True

    def __init__(
        self,
        *,
        attn: MultiHeadAttention,
        cross_attn: MultiHeadAttention,
        ffn: nn.Module,
        attn_add_norm: AddNorm,
        cross_add_norm: AddNorm,
        ffn_add_norm: AddNorm,
    ) -> None:
        super().__init__(
            attn=attn,
            ffn=ffn,
            attn_add_norm=attn_add_norm,
            ffn_add_norm=ffn_add_norm,
            cross_attn=cross_attn,
            cross_add_norm=cross_add_norm,
        )
