"""Multi-head attention (Vaswani et al. 2017, §3.2.2), the post's §1–§2.

    head_h = Attention(x W^Q_h, c W^K_h, c W^V_h)          MHA(x, c) = Concat(head_1 .. head_H) W^O

Each head works in its own ``Dh = D / H``-dimensional subspace, so H heads can follow H different relations at
the cost of one full-width head (post §1.2). The five steps of the post's §2.1, with this module's hook points:

1. project      ``q = x W^Q`` ``(B, T, D)``, ``k, v = c W^K, c W^V`` ``(B, S, Hkv*Dh)``
2. split heads  view ``(B, T, H, Dh)`` then transpose → ``(B, H, T, Dh)``      ``hook_q``, ``hook_k``, ``hook_v``
3. attend       ``softmax(q k^T * scale + bias) v`` by a kernel (kernels.py)   ``hook_scores``, ``hook_weights``,
                                                                              ``hook_z`` ``(B, H, T, Dh)``
4. merge heads  transpose back → ``(B, T, H, Dh)`` → reshape ``(B, T, D)``     ``hook_merged``
5. project out  ``W^O``                                                       ``hook_out``

Grouped-query attention (Ainslie et al. 2023) shares each key/value head between ``H / Hkv`` query heads
(``n_kv_heads``; 1 is multi-query attention, Shazeer 2019). ``scale`` defaults to ``1/sqrt(Dh)``: the dot product of
two random Dh-dim vectors with unit-variance entries has variance Dh, and dividing by sqrt(Dh) brings it back to 1
(post §1.3) — per head, not per ``D``.

Positional schemes that act inside attention (RoPE, ALiBi, Shaw) are injected as ``positional``; this module
calls the scheme's hooks and never asks which scheme it is.
"""

from __future__ import annotations

import dataclasses
import math
from functools import partial
from typing import Any, NoReturn, cast

import torch
from torch import nn

from anatomy.components import kernels
from anatomy.components.context import AttentionContext
from anatomy.components.hook_point import HookPoint, hooked
from anatomy.components.inputs import Given, check_memory, own_context, refuse_keywords
from anatomy.components.kv_cache import KVCache, StaticKVCache
from anatomy.components.norms import TokenBatchNorm, norm_class
from anatomy.components.positional.base import PositionalScheme
from anatomy.shapes import check_choice, check_divisible, check_positive

_PLAIN = Given()  # a call with ctx=None: no mask, no positions, no bias


class kernel_setting:  # noqa: N801 (used like ``property``)
    """A module attribute that chooses its kernel (``kernel``, ``kernel_args``): reading it gives the value, setting
    it stores the value and has the module resolve again (``_resolve``), so a call never
    resolves; a value the module refuses leaves the old one in place."""

    def __init__(self, slot: str) -> None:
        self.slot = slot

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        return self if obj is None else obj.__dict__[self.slot]

    def __set__(self, obj: Any, value: Any) -> None:
        old = obj.__dict__[self.slot]
        obj.__dict__[self.slot] = value
        try:
            obj._resolve()
        except ValueError:
            obj.__dict__[self.slot] = old
            obj._resolve()
            raise


class MultiHeadAttention(nn.Module):
    """Self- or cross-attention with H query heads and Hkv key/value heads.

    Args (keyword-only):
        d_model: model width D.
        n_heads: query heads H; ``d_model % n_heads == 0``.
        n_kv_heads: key/value heads Hkv (default H); ``n_heads % n_kv_heads == 0``.
        bias: bias on the four projections.
        dropout: dropout on the attention weights (training only).
        kernel: ``"auto"`` | ``"sdpa"`` | ``"math"`` | ``"loop"``.
        scale: score scale; default ``1/sqrt(Dh)``.
        fused_qkv: one ``qkv_proj`` Linear instead of ``q_proj``, ``k_proj``, ``v_proj``.
        positional: a scheme of site ``"attention"`` (RoPE, ALiBi, Shaw) or ``None``.
        head_dim: Dh; default ``d_model // n_heads`` (the post's d_k). Set it to decouple the heads' width from
            D (T5 v1.1 small: D=512, 6 heads of 64): q/k/v project D → H·Dh (Hkv·Dh) and the output H·Dh → D.
        qk_norm: ``"rmsnorm"`` | ``"layernorm"`` | ``None``: normalise each head's query and key over Dh (one
            weight of width Dh shared by the heads) after the split and before RoPE (QK-norm, Qwen3/Gemma 3/OLMo).
            It bounds the logits q·k without a smaller learning rate; the scale 1/sqrt(Dh) stays.
        norm_eps: epsilon of the QK-norm.
        sliding_window: W or ``None``: self-attention sees only the W key slots ending at the query's own
            (Mistral's local attention; Longformer's band of 2W - 1 slots when not causal). Cross-attention is
            never windowed. A cache built with ``KVCache(window=W)`` (``new_caches`` does) rolls: it holds only
            the entries the band can still reach.
        qkv_bias: bias on the q/k/v projections (default: ``bias``); Qwen2 has them with an unbiased ``o_proj``.
        softcap: ``c`` or ``None``: soft-cap the scaled scores to ``c * tanh(scores / c)`` before the mask (Gemma
            2); needs a kernel that materialises the scores (``"auto"`` picks ``"math"``).
    """

    def __init__(
        self,
        *,
        d_model: int,
        n_heads: int,
        n_kv_heads: int | None = None,
        bias: bool = True,
        dropout: float = 0.0,
        kernel: str = "auto",
        scale: float | None = None,
        fused_qkv: bool = False,
        positional: PositionalScheme | None = None,
        head_dim: int | None = None,
        qk_norm: str | None = None,
        norm_eps: float = 1e-6,
        sliding_window: int | None = None,
        qkv_bias: bool | None = None,
        softcap: float | None = None,
    ) -> None:
        super().__init__()
        check_positive("d_model", d_model)
        check_positive("n_heads", n_heads)
        if head_dim is None:
            check_divisible("d_model", d_model, "n_heads", n_heads)
        else:
            check_positive("head_dim", head_dim)
        n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
        check_positive("n_kv_heads", n_kv_heads)
        check_divisible("n_heads", n_heads, "n_kv_heads", n_kv_heads)
        check_choice("kernel", kernel, kernels.KERNEL_NAMES)
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        if positional is not None and positional.site != "attention":
            raise ValueError(
                f"positional scheme {type(positional).__name__} acts at site {positional.site!r}, "
                "not inside attention; the model builder places it"
            )
        self.d_model, self.n_heads, self.n_kv_heads = d_model, n_heads, n_kv_heads
        self.head_dim = d_model // n_heads if head_dim is None else head_dim
        self.inner_dim = n_heads * self.head_dim  # H·Dh: = D unless head_dim was set
        self.dropout, self.fused_qkv = dropout, fused_qkv
        self.scale = 1.0 / math.sqrt(self.head_dim) if scale is None else float(scale)
        kv_dim = n_kv_heads * self.head_dim
        in_bias = bias if qkv_bias is None else qkv_bias
        if fused_qkv:
            self.qkv_proj = nn.Linear(d_model, self.inner_dim + 2 * kv_dim, bias=in_bias)
        else:
            self.q_proj = nn.Linear(d_model, self.inner_dim, bias=in_bias)
            self.k_proj = nn.Linear(d_model, kv_dim, bias=in_bias)
            self.v_proj = nn.Linear(d_model, kv_dim, bias=in_bias)
        self.o_proj = nn.Linear(self.inner_dim, d_model, bias=bias)
        self.positional = positional
        if sliding_window is not None:
            check_positive("sliding_window", sliding_window)
        self.sliding_window = sliding_window
        if softcap is not None and not softcap > 0:
            raise ValueError(f"softcap must be > 0 or None, got {softcap}")
        self.softcap = None if softcap is None else float(softcap)
        self.qk_norm = qk_norm
        if qk_norm is not None:
            make = norm_class(qk_norm)
            if make is TokenBatchNorm:
                raise ValueError("qk_norm must be 'rmsnorm' or 'layernorm' (a per-token norm), got 'batchnorm'")
            self.q_norm, self.k_norm = make(self.head_dim, eps=norm_eps), make(self.head_dim, eps=norm_eps)
        # The kernel this module calls (components/kernels.py): the registry entry `kernel` with `kernel_args`
        # bound, resolved once per kind of call and setting (setting either attribute forgets, never a call).
        self._kernel: str = kernel
        self._kernel_args: dict[str, Any] = {}
        self._resolved: dict[tuple[bool, bool, bool, bool], kernels.Kernel] = {}
        self._resolve()
        self.hook_q = HookPoint()  # (B, H, T, Dh), after QK-norm and RoPE
        self.hook_k = HookPoint()  # (B, Hkv, S, Dh), after RoPE, holding the cache
        self.hook_v = HookPoint()  # (B, Hkv, S, Dh)
        self.hook_scores = HookPoint()  # (B, H, T, S), scaled, biased, before the mask (math/loop kernels)
        self.hook_weights = HookPoint()  # (B, H, T, S), after softmax (math/loop kernels)
        self.hook_z = HookPoint()  # (B, H, T, Dh), each head's output
        self.hook_merged = HookPoint()  # (B, T, H·Dh), heads merged
        self.hook_out = HookPoint()  # (B, T, D), after o_proj

    # --- what the module calls, resolved once per setting -------------------------------------------------------
    kernel = kernel_setting("_kernel")
    kernel_args = kernel_setting("_kernel_args")

    def _resolve(self) -> None:
        """Check the kernel's name and forget what was resolved for earlier settings; each kind of call resolves
        again on its first call."""
        if self._kernel != "auto":
            kernels.entry(self._kernel)  # one line naming the valid names
        self._resolved.clear()

    def _kernel_for(self, need_weights: bool, hooked_scores: bool, value_term: bool) -> kernels.Kernel:
        """The registry entry a call of this kind runs (``kernel_args`` bound): resolved on the first call of the
        kind after a setting (memoised)."""
        key = (need_weights, hooked_scores, value_term, self.softcap is not None)
        hit = self._resolved.get(key)
        if hit is None:
            hit = kernels.resolve(
                self._kernel,
                need_weights=need_weights,
                value_bias=value_term,
                hooked=hooked_scores,
                where=type(self).__name__,
                softcap=key[3],
            )
            if self._kernel_args:
                hit = dataclasses.replace(hit, fn=cast(kernels.AttentionFunction, partial(hit.fn, **self._kernel_args)))
            self._resolved[key] = hit
        return hit

    def _project(self, x: torch.Tensor, source: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Step 1, the projections: ``x: (B, T, D)``, ``source: (B, S, D)`` → ``q (B, T, H·Dh)``,
        ``k, v (B, S, Hkv·Dh)``."""
        kv_dim = self.n_kv_heads * self.head_dim
        if not self.fused_qkv:
            return self.q_proj(x), self.k_proj(source), self.v_proj(source)
        if source is x:
            return tuple(self.qkv_proj(x).split([self.inner_dim, kv_dim, kv_dim], dim=-1))
        w, b = self.qkv_proj.weight, self.qkv_proj.bias
        q = nn.functional.linear(x, w[: self.inner_dim], None if b is None else b[: self.inner_dim])
        kv = nn.functional.linear(source, w[self.inner_dim :], None if b is None else b[self.inner_dim :])
        return (q, *kv.split([kv_dim, kv_dim], dim=-1))  # type: ignore[no-untyped-call]  # torch's Tensor.split is unannotated

    def _project_q(self, x: torch.Tensor) -> torch.Tensor:
        """The query projection alone ``(B, T, H·Dh)`` (cross-attention over a filled cache)."""
        if not self.fused_qkv:
            q: torch.Tensor = self.q_proj(x)
            return q
        b, w = self.qkv_proj.bias, self.qkv_proj.weight
        return nn.functional.linear(x, w[: self.inner_dim], None if b is None else b[: self.inner_dim])

    def split_heads(self, x: torch.Tensor, heads: int) -> torch.Tensor:
        """Step 2: ``(B, T, heads·Dh)`` → view ``(B, T, heads, Dh)``, then transpose to ``(B, heads, T, Dh)``."""
        b, t, _ = x.shape
        return x.view(b, t, heads, self.head_dim).transpose(1, 2)

    def window(self, ctx: AttentionContext) -> int | None:
        """The sliding window of this call: the layer's on self-attention, none on cross-attention."""
        return None if ctx.cross else self.sliding_window

    def kernel_mask(self, ctx: AttentionContext, s: int, causal_flag: bool = False) -> tuple[torch.Tensor | None, bool]:
        """This layer's entry in the forward's mask plan for ``s`` held keys: ``(mask, is_causal)``
        (``AttentionContext.kernel_mask`` with the layer's window and heads; memoised in the context)."""
        return ctx.kernel_mask(self.window(ctx), s, self.n_heads, causal_flag)

    def attend(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, ctx: AttentionContext, args: kernels.AttentionArgs
    ) -> kernels.Weights:
        """Step 3: ``softmax(q k^T * scale + bias) v`` by the kernel. ``q (B, H, T, Dh)``, ``k, v (B, Hkv, S, Dh)``;
        ``args`` holds the scale, bias, value term, dropout and ``need_weights`` and gets here this layer's entry in
        the forward's mask plan (:meth:`kernel_mask`) and the score/weight hooks (for the kernels that materialise
        the scores) → ``(out (B, H, T, Dh), weights (B, H, T, S) or None)``."""
        hooked_scores = hooked(self, "hook_scores") or hooked(self, "hook_weights")
        kernel = self._kernel_for(args.need_weights, hooked_scores, args.value_bias is not None)
        args.mask, args.is_causal = self.kernel_mask(ctx, k.shape[-2], kernel.causal_flag and args.bias is None)
        if kernel.returns_weights:
            args.score_hook, args.weight_hook = self.hook_scores, self.hook_weights
        return kernel.fn(q, k, v, args)

    def merge_heads(self, out: torch.Tensor) -> torch.Tensor:
        """Step 4: ``(B, H, T, Dh)`` → transpose back to ``(B, T, H, Dh)`` → reshape ``(B, T, H·Dh)``."""
        b, _, t, _ = out.shape
        return out.transpose(1, 2).reshape(b, t, self.inner_dim)

    def standalone_context(self, x: torch.Tensor, memory: torch.Tensor | None, given: Given) -> AttentionContext:
        """This layer's context for :func:`~anatomy.components.inputs.attention_inputs`: over ``x`` itself, or over
        ``memory`` (its keys, masked by ``mask`` / ``key_padding_mask``), the cache ``given.kv_cache`` included."""
        given.refuse_memory(self, "attends to one set of keys: give their masks as mask / key_padding_mask")
        if memory is not None:
            check_memory("memory", memory, x, self.d_model)
        return own_context(
            x,
            memory,
            given,
            heads=self.n_heads,
            d_model=self.d_model,
            cache=given.kv_cache,
            is_causal=bool(given.is_causal),
        )

    def forward(
        self,
        x: torch.Tensor,
        ctx: AttentionContext | None = None,
        *,
        context: torch.Tensor | None = None,
        kv_cache: KVCache | StaticKVCache | None = None,
        need_weights: bool = False,
        **removed: NoReturn,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Attend from ``x: (B, T, D)`` to ``context: (B, S, D)`` (default: ``x`` itself). Returns
        ``(output (B, T, D), weights (B, H, T, S) or None)``.

        ``ctx`` is the forward's :class:`AttentionContext` (masks, causal rule, positions, shared bias), built once
        by the model, or for a call on its own by ``attention_inputs(attn, x, mask=..., is_causal=...)``
        (components/inputs.py); ``None`` is the plain call: no mask, positions after what ``kv_cache`` holds.
        """
        if removed:
            refuse_keywords(self, "attn(x, {ctx})", "attn, x", removed)
        cross = context is not None
        if ctx is None:
            if context is not None:
                check_memory("context", context, x, self.d_model)
            ctx = own_context(
                x, context, _PLAIN, heads=self.n_heads, d_model=self.d_model, cache=kv_cache, is_causal=False
            )
        elif ctx.cross != cross:
            raise ValueError(
                "ctx is a cross-attention context but no context (memory) was given"
                if ctx.cross
                else "context (memory) given with a self-attention ctx: build it with attention_inputs(attn, x, memory)"
            )
        positional = None if cross else self.positional
        h, hkv = self.n_heads, self.n_kv_heads
        if cross and kv_cache is not None and len(kv_cache):
            q = self.split_heads(self._project_q(x), h)  # (B, H, T, Dh)
            if self.qk_norm is not None:
                q = self.q_norm(q)
            k, v, k_pos = kv_cache.k, kv_cache.v, kv_cache.positions  # memory projected once, at step 0
            assert k is not None and v is not None and k_pos is not None
        else:
            q, k, v = self._project(x, x if context is None else context)  # (B, T, H·Dh), (B, S, Hkv·Dh) twice
            q, k, v = self.split_heads(q, h), self.split_heads(k, hkv), self.split_heads(v, hkv)  # (B, H|Hkv, ., Dh)
            if self.qk_norm is not None:  # over Dh, per head and token; before RoPE rotates the pairs
                q, k = self.q_norm(q), self.k_norm(k)
            k_pos = ctx.key_positions if cross else ctx.positions
            if positional is not None:
                q, k = positional.rotate_for(ctx, q, k)
            if kv_cache is not None:
                k, v, k_pos = kv_cache.update(k, v, k_pos)  # (B, Hkv, S, Dh)
        q, k, v = self.hook_q(q), self.hook_k(k), self.hook_v(v)
        bias, value_bias = ctx.bias, None
        if positional is not None:
            extra = positional.score_bias_for(ctx, q, k_pos, self.scale)
            if extra is not None:
                bias = extra if bias is None else bias + extra
            value_bias = positional.value_bias(ctx.positions, k_pos) if positional.has_value_term else None
        args = kernels.AttentionArgs(
            scale=self.scale,
            bias=bias,
            value_bias=value_bias,
            dropout_p=self.dropout if self.training else 0.0,
            need_weights=need_weights,
            softcap=self.softcap,
        )
        out, weights = self.attend(q, k, v, ctx, args)  # (B, H, T, Dh)
        out = self.merge_heads(self.hook_z(out))  # (B, T, H·Dh), H·Dh = D by default
        return self.hook_out(self.o_proj(self.hook_merged(out))), weights

    def extra_repr(self) -> str:
        return (
            f"d_model={self.d_model}, n_heads={self.n_heads}, n_kv_heads={self.n_kv_heads}, "
            + (f"head_dim={self.head_dim}, " if self.inner_dim != self.d_model else "")
            + (f"qk_norm={self.qk_norm!r}, " if self.qk_norm else "")
            + (f"sliding_window={self.sliding_window}, " if self.sliding_window else "")
            + (f"softcap={self.softcap:g}, " if self.softcap is not None else "")
            + f"kernel={self._kernel!r}, scale={self.scale:.4g}"
        )
