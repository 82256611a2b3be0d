"""Transformer blocks: the post's §5 table as modules.

``EncoderBlock``: self-attention then FFN, each wrapped in Add & Norm. With ``is_causal=True`` it is also the
block of decoder-only language models (GPT-2, Llama). ``DecoderBlock``: masked self-attention, cross-attention
to the encoder memory, FFN (Vaswani et al. 2017, Fig. 1 right).

Blocks receive their parts (dependency injection): they never read a config. ``EncoderBlock.build(...)`` and
``DecoderBlock.build(...)`` assemble the usual parts from explicit keyword arguments.
Hook points: ``hook_resid_pre`` → ``hook_attn_in`` (what attention sees) → ``hook_attn_out`` →
``hook_resid_mid`` → ``hook_ffn_in`` → ``hook_ffn_out`` → ``hook_resid_post``.

``parallel_residual=True`` (GPT-J, GPT-NeoX; Pre-Norm only): the FFN reads the block's *input*, not the residual
after attention, ``x + attn(norm_1(x)) + ffn(norm_2(x))``; ``hook_resid_mid`` is then ``x + attn(...)``.
"""

from __future__ import annotations

from functools import partial

import torch
from torch import nn

from anatomy.components.add_norm import AddNorm
from anatomy.components.attention import MultiHeadAttention
from anatomy.components.ffn import FeedForward
from anatomy.components.hook_point import HookPoint
from anatomy.components.kv_cache import KVCache
from anatomy.components.norms import norm_class
from anatomy.components.positional.base import PositionalScheme


def _parts(d_model, n_heads, n_kv_heads, d_ff, activation, norm, norm_eps, placement, bias, dropout,
           attention_dropout, kernel, attn_scale, fused_qkv, alpha, head_dim, qk_norm, sliding_window, *,
           qkv_bias=None, attn_softcap=None, norm_offset=0.0):
    offset = {"offset": norm_offset} if norm_offset else {}  # only RMSNorm takes one (the builder checks)
    make_norm = partial(norm_class(norm), eps=norm_eps, bias=bias, **offset)
    add_norm = partial(AddNorm, d_model, placement=placement, make_norm=make_norm, dropout=dropout, alpha=alpha)
    attn = partial(MultiHeadAttention, d_model=d_model, n_heads=n_heads, n_kv_heads=n_kv_heads, bias=bias,
                   dropout=attention_dropout, kernel=kernel, scale=attn_scale, fused_qkv=fused_qkv, head_dim=head_dim,
                   qk_norm=qk_norm, norm_eps=norm_eps, sliding_window=sliding_window,
                   **({"qkv_bias": qkv_bias} if qkv_bias is not None else {}),
                   **({"softcap": attn_softcap} if attn_softcap is not None else {}))
    ffn = FeedForward(d_model=d_model, d_ff=d_ff, activation=activation, bias=bias)
    return add_norm, attn, ffn


class EncoderBlock(nn.Module):
    def __init__(self, *, attn: MultiHeadAttention, ffn: nn.Module, attn_add_norm: AddNorm,
                 ffn_add_norm: AddNorm, parallel_residual: bool = False) -> None:
        super().__init__()
        if parallel_residual and (attn_add_norm.placement, ffn_add_norm.placement) != ("pre", "pre"):
            raise ValueError("parallel_residual needs norm_position='pre' (both sub-layers read the block input)")
        self.attn_add_norm, self.attn = attn_add_norm, attn
        self.ffn_add_norm, self.ffn = ffn_add_norm, ffn
        self.parallel_residual = parallel_residual
        for name in ("resid_pre", "attn_in", "attn_out", "resid_mid", "ffn_in", "ffn_out", "resid_post"):
            setattr(self, f"hook_{name}", HookPoint())

    @classmethod
    def build(cls, *, d_model: int, n_heads: int, n_kv_heads: int | None = None, d_ff: int | None = None,
              activation: str = "relu", norm: str = "layernorm", norm_eps: float = 1e-5, placement: str = "post",
              bias: bool = True, dropout: float = 0.0, attention_dropout: float = 0.0, kernel: str = "auto",
              attn_scale: float | None = None, fused_qkv: bool = False, alpha: float = 1.0,
              positional: PositionalScheme | None = None, head_dim: int | None = None,
              qk_norm: str | None = None, sliding_window: int | None = None, qkv_bias: bool | None = None,
              attn_softcap: float | None = None, norm_offset: float = 0.0,
              parallel_residual: bool = False) -> EncoderBlock:
        add_norm, attn, ffn = _parts(d_model, n_heads, n_kv_heads, d_ff, activation, norm, norm_eps, placement,
                                     bias, dropout, attention_dropout, kernel, attn_scale, fused_qkv, alpha, head_dim,
                                     qk_norm, sliding_window, qkv_bias=qkv_bias, attn_softcap=attn_softcap,
                                     norm_offset=norm_offset)
        return cls(attn=attn(positional=positional), ffn=ffn, attn_add_norm=add_norm(), ffn_add_norm=add_norm(),
                   parallel_residual=parallel_residual)

    def forward(self, x: torch.Tensor, *, mask: torch.Tensor | None = None, is_causal: bool = False,
                kv_cache: KVCache | None = None, need_weights: bool = False, positions: torch.Tensor | None = None,
                attn_bias: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        x = block_in = self.hook_resid_pre(x)  # (B, T, D)
        h = self.hook_attn_in(self.attn_add_norm.before(x))
        a, weights = self.attn(h, mask=mask, is_causal=is_causal, kv_cache=kv_cache, need_weights=need_weights,
                               positions=positions, attn_bias=attn_bias)
        x = self.hook_resid_mid(self.attn_add_norm.after(x, self.hook_attn_out(a)))  # (B, T, D)
        h = self.hook_ffn_in(self.ffn_add_norm.before(block_in if self.parallel_residual else x))
        x = self.ffn_add_norm.after(x, self.hook_ffn_out(self.ffn(h)))  # (B, T, D)
        return self.hook_resid_post(x), weights


class DecoderBlock(nn.Module):
    def __init__(self, *, attn: MultiHeadAttention, cross_attn: MultiHeadAttention, ffn: nn.Module,
                 attn_add_norm: AddNorm, cross_add_norm: AddNorm, ffn_add_norm: AddNorm) -> None:
        super().__init__()
        self.attn_add_norm, self.attn = attn_add_norm, attn
        self.cross_add_norm, self.cross_attn = cross_add_norm, cross_attn
        self.ffn_add_norm, self.ffn = ffn_add_norm, ffn
        for name in ("resid_pre", "attn_in", "attn_out", "resid_mid", "cross_in", "cross_out", "resid_cross",
                     "ffn_in", "ffn_out", "resid_post"):
            setattr(self, f"hook_{name}", HookPoint())

    @classmethod
    def build(cls, *, d_model: int, n_heads: int, n_kv_heads: int | None = None, d_ff: int | None = None,
              activation: str = "relu", norm: str = "layernorm", norm_eps: float = 1e-5, placement: str = "post",
              bias: bool = True, dropout: float = 0.0, attention_dropout: float = 0.0, kernel: str = "auto",
              attn_scale: float | None = None, fused_qkv: bool = False, alpha: float = 1.0,
              positional: PositionalScheme | None = None, head_dim: int | None = None,
              qk_norm: str | None = None, sliding_window: int | None = None, qkv_bias: bool | None = None,
              attn_softcap: float | None = None, norm_offset: float = 0.0) -> DecoderBlock:
        add_norm, attn, ffn = _parts(d_model, n_heads, n_kv_heads, d_ff, activation, norm, norm_eps, placement,
                                     bias, dropout, attention_dropout, kernel, attn_scale, fused_qkv, alpha, head_dim,
                                     qk_norm, sliding_window, qkv_bias=qkv_bias, attn_softcap=attn_softcap,
                                     norm_offset=norm_offset)
        return cls(attn=attn(positional=positional), cross_attn=attn(positional=None, sliding_window=None), ffn=ffn,
                   attn_add_norm=add_norm(), cross_add_norm=add_norm(), ffn_add_norm=add_norm())

    def forward(self, x: torch.Tensor, memory: torch.Tensor, *, mask: torch.Tensor | None = None,
                memory_mask: torch.Tensor | None = None, is_causal: bool = True,
                kv_cache: tuple[KVCache, KVCache] | None = None, need_weights: bool = False,
                positions: torch.Tensor | None = None, attn_bias: torch.Tensor | None = None):
        """``x: (B, T, D)`` attends causally to itself and then to ``memory: (B, S, D)``.

        Returns ``(x, (self_weights, cross_weights))``.
        """
        self_cache, cross_cache = kv_cache if kv_cache is not None else (None, None)
        x = self.hook_resid_pre(x)
        h = self.hook_attn_in(self.attn_add_norm.before(x))
        a, self_w = self.attn(h, mask=mask, is_causal=is_causal, kv_cache=self_cache, need_weights=need_weights,
                              positions=positions, attn_bias=attn_bias)
        x = self.hook_resid_mid(self.attn_add_norm.after(x, self.hook_attn_out(a)))  # (B, T, D)
        h = self.hook_cross_in(self.cross_add_norm.before(x))
        c, cross_w = self.cross_attn(h, context=memory, mask=memory_mask, kv_cache=cross_cache,
                                     need_weights=need_weights)
        x = self.hook_resid_cross(self.cross_add_norm.after(x, self.hook_cross_out(c)))  # (B, T, D)
        h = self.hook_ffn_in(self.ffn_add_norm.before(x))
        x = self.ffn_add_norm.after(x, self.hook_ffn_out(self.ffn(h)))  # (B, T, D)
        return self.hook_resid_post(x), (self_w, cross_w)
