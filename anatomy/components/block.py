"""Transformer blocks: the post's §5 table as modules.

``EncoderBlock``: self-attention then FFN, each wrapped in Add & Norm. With ``is_causal=True`` it is also the
block of decoder-only language models (GPT-2, Llama). ``DecoderBlock``: masked self-attention, cross-attention
to the encoder memory, FFN (Vaswani et al. 2017, Fig. 1 right).

Both are forms of one ``TransformerBlock`` (cross-attention off or on). Blocks receive their parts (dependency
injection): they never read a config. ``EncoderBlock.build(...)`` and ``DecoderBlock.build(...)`` assemble the
usual parts from explicit keyword arguments (``build_block``, the one block factory, which ``build_model`` uses too).
Hook points: ``hook_resid_pre`` → ``hook_attn_in`` (what attention sees) → ``hook_attn_out`` →
``hook_resid_mid`` → (``hook_cross_in`` → ``hook_cross_out`` → ``hook_resid_cross``) → ``hook_ffn_in`` →
``hook_ffn_out`` → ``hook_resid_post``. Inside a model every block receives the forward's ``AttentionContext``
(components/context.py) and checks nothing again.

``parallel_residual=True`` (GPT-J, GPT-NeoX; Pre-Norm only): the FFN reads the block's *input*, not the residual
after attention, ``x + attn(norm_1(x)) + ffn(norm_2(x))``; ``hook_resid_mid`` is then ``x + attn(...)``.
"""

from __future__ import annotations

from typing import Any, ClassVar, NoReturn

import torch
from torch import nn

from anatomy.components.add_norm import AddNorm
from anatomy.components.attention import MultiHeadAttention
from anatomy.components.context import AttentionContext
from anatomy.components.ffn import FeedForward
from anatomy.components.hook_point import HookPoint
from anatomy.components.inputs import Given, check_memory, own_context, refuse_keywords
from anatomy.components.kv_cache import KVCache, StaticKVCache
from anatomy.components.norms import make_norm, norm_class
from anatomy.components.positional.base import PositionalScheme

BlockCache = KVCache | StaticKVCache | tuple[KVCache | StaticKVCache, KVCache] | None  # self's, or (self, cross)


class TransformerBlock(nn.Module):
    """Self-attention, optional cross-attention to a memory, FFN; each sub-layer wrapped in Add & Norm.

    Without ``cross_attn`` it is the encoder block and the block of decoder-only LMs; with it, the decoder block
    of an encoder-decoder model. ``EncoderBlock`` and ``DecoderBlock`` are its two forms: each refuses the other's
    parts, and the causal default is off for the first, on for the second."""

    default_causal: ClassVar[bool] = False  # is_causal when a call does not say
    cross_attention: ClassVar[bool | None] = None  # the form a subclass is (with or without); None: either

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
        form = type(self).cross_attention
        if form is not None and form != (cross_attn is not None):
            need = "needs cross_attn and cross_add_norm" if form else "takes no cross_attn and cross_add_norm"
            raise TypeError(f"{type(self).__name__} {need} (TransformerBlock takes either form)")
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

    @classmethod
    def build(cls, **kwargs: Any) -> TransformerBlock:
        """``EncoderBlock.build(d_model=..., n_heads=..., ...)`` / ``DecoderBlock.build(...)``: a block of this class
        made of the usual parts from explicit keyword arguments (:func:`build_block`, the builder ``build_model``
        uses for every block)."""
        return build_block(cls, **kwargs)

    def standalone_context(self, x: torch.Tensor, memory: torch.Tensor | None, given: Given) -> AttentionContext:
        """This block's context for :func:`~anatomy.components.inputs.attention_inputs`: self-attention's, and the
        memory's (``memory_mask``, ``memory_key_padding_mask``) as its ``cross_ctx``."""
        self_cache, cross_cache = split_cache(given.kv_cache)
        heads, d_model = self.attn.n_heads, self.attn.d_model
        causal = self.default_causal if given.is_causal is None else given.is_causal
        ctx = own_context(x, None, given, heads=heads, d_model=d_model, cache=self_cache, is_causal=causal)
        if self.cross_attn is None:
            given.refuse_memory(self, "has no cross-attention")
        elif memory is not None:
            check_memory("memory", memory, x, d_model)
            ctx.cross_ctx = own_context(
                x, memory, given, heads=heads, d_model=d_model, cache=cross_cache, is_causal=False, memory_masks=True
            )
        return ctx

    def forward(
        self,
        x: torch.Tensor,
        memory: torch.Tensor | None = None,
        ctx: AttentionContext | None = None,
        *,
        kv_cache: BlockCache = None,
        need_weights: bool = False,
        **removed: NoReturn,
    ) -> tuple[torch.Tensor, Any]:
        """``x: (B, T, D)`` (and, with cross-attention, ``memory: (B, S, D)``) → ``(x, weights)``; weights are
        ``self_weights`` or, with cross-attention, ``(self_weights, cross_weights)``. ``kv_cache`` is a
        ``KVCache`` or a ``(self, cross)`` pair. ``ctx`` is the forward's :class:`AttentionContext` (a stack's, or
        ``attention_inputs(block, x, memory, mask=...)`` for a call on its own); ``None`` is the plain call: no
        mask, the block's causal default."""
        if removed:
            form = (
                ("block(x, memory, {ctx})", "block, x, memory")
                if self.cross_attn is not None
                else ("block(x, ctx={ctx})", "block, x")
            )
            refuse_keywords(self, *form, removed)
        cross = self.cross_attn is not None
        if cross and memory is None:
            raise ValueError(f"{type(self).__name__} attends to an encoder memory: give memory (B, S, D)")
        if isinstance(memory, AttentionContext):
            raise TypeError(
                f"{type(self).__name__}'s second argument is the encoder memory; give the context as ctx: "
                "block(x, ctx=attention_inputs(block, x, ...))"
            )
        if ctx is None:
            ctx = self.standalone_context(x, memory, Given(kv_cache=kv_cache))
        self_cache, cross_cache = split_cache(kv_cache)
        x = block_in = self.hook_resid_pre(x)  # (B, T, D)
        h = self.hook_attn_in(self.attn_add_norm.before(x))
        a, weights = self.attn(h, ctx, kv_cache=self_cache, need_weights=need_weights)
        x = self.hook_resid_mid(self.attn_add_norm.after(x, self.hook_attn_out(a)))  # (B, T, D)
        if self.cross_attn is not None:
            h = self.hook_cross_in(self.cross_add_norm.before(x))
            c, cross_w = self.cross_attn(
                h, ctx.cross_ctx, context=memory, kv_cache=cross_cache, need_weights=need_weights
            )
            x = self.hook_resid_cross(self.cross_add_norm.after(x, self.hook_cross_out(c)))  # (B, T, D)
            weights = (weights, cross_w)
        h = self.hook_ffn_in(self.ffn_add_norm.before(block_in if self.parallel_residual else x))
        x = self.ffn_add_norm.after(x, self.hook_ffn_out(self.ffn(h)))  # (B, T, D)
        out: torch.Tensor = self.hook_resid_post(x)
        return out, weights


def split_cache(kv_cache: BlockCache) -> tuple[KVCache | StaticKVCache | None, KVCache | None]:
    """A block's ``kv_cache``: a ``KVCache`` (self-attention only) or a ``(self, cross)`` pair."""
    if isinstance(kv_cache, tuple):
        return kv_cache
    return kv_cache, None


class EncoderBlock(TransformerBlock):
    """Self-attention then FFN (bidirectional by default; ``is_causal=True`` in decoder-only LMs): a
    ``TransformerBlock`` without ``cross_attn`` / ``cross_add_norm``."""

    cross_attention = False


class DecoderBlock(TransformerBlock):
    """Masked self-attention, cross-attention to the encoder memory, FFN (Vaswani et al. 2017, Fig. 1 right): a
    ``TransformerBlock`` with ``cross_attn`` and ``cross_add_norm``."""

    default_causal = True
    cross_attention = True


def build_block(
    cls: type[TransformerBlock],
    *,
    d_model: int,
    n_heads: int,
    n_kv_heads: int | None = None,
    d_ff: int | None = None,
    activation: str = "relu",
    norm: str = "layernorm",
    norm_eps: float = 1e-5,
    placement: str = "post",
    bias: bool = True,
    dropout: float = 0.0,
    attention_dropout: float = 0.0,
    kernel: str = "auto",
    attn_scale: float | None = None,
    fused_qkv: bool = False,
    alpha: float = 1.0,
    positional: PositionalScheme | None = None,
    head_dim: int | None = None,
    qk_norm: str | None = None,
    sliding_window: int | None = None,
    qkv_bias: bool | None = None,
    attn_softcap: float | None = None,
    norm_offset: float = 0.0,
    parallel_residual: bool = False,
) -> TransformerBlock:
    """``EncoderBlock.build(...)`` / ``DecoderBlock.build(...)``: a block of the usual parts from explicit
    arguments, made by the same part builders as ``build_model`` (``make_norm``, ``AddNorm``, the attention and FFN
    constructors); a ``DecoderBlock`` also gets cross-attention (never windowed, no positional scheme)."""

    def norm_of(width: int) -> nn.Module:
        return make_norm(norm, width, eps=norm_eps, bias=bias, offset=norm_offset)

    def add_norm() -> AddNorm:
        return AddNorm(d_model, placement=placement, make_norm=norm_of, dropout=dropout, alpha=alpha)

    def attention(scheme: PositionalScheme | None, window: int | None) -> MultiHeadAttention:
        return MultiHeadAttention(
            d_model=d_model,
            n_heads=n_heads,
            n_kv_heads=n_kv_heads,
            head_dim=head_dim,
            bias=bias,
            qkv_bias=qkv_bias,
            dropout=attention_dropout,
            kernel=kernel,
            scale=attn_scale,
            fused_qkv=fused_qkv,
            qk_norm=qk_norm,
            norm_eps=norm_eps,
            softcap=attn_softcap,
            positional=scheme,
            sliding_window=window,
        )

    norm_class(norm)  # an unknown norm is named before any part is made
    ffn = FeedForward(d_model=d_model, d_ff=d_ff, activation=activation, bias=bias)
    if cls.cross_attention:  # the decoder's form: cross-attention to the memory
        if parallel_residual:
            raise ValueError("parallel_residual is for blocks without cross-attention")
        return cls(
            attn=attention(positional, sliding_window),
            attn_add_norm=add_norm(),
            cross_attn=attention(None, None),
            cross_add_norm=add_norm(),
            ffn=ffn,
            ffn_add_norm=add_norm(),
        )
    return cls(
        attn=attention(positional, sliding_window),
        attn_add_norm=add_norm(),
        ffn=ffn,
        ffn_add_norm=add_norm(),
        parallel_residual=parallel_residual,
    )
