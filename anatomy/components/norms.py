"""Normalisation layers (post §4.2) and the name registry the builder resolves.

``LayerNorm`` (Ba et al. 2016) normalises each token over its D features::

    LayerNorm(x) = gamma * (x - mean(x)) / sqrt(var(x) + eps) + beta            (statistics over the last dim)

so a token's scale never depends on the other tokens of the batch or on its length. ``RMSNorm`` (Zhang & Sennrich
2019; Llama, T5) drops the mean and beta: ``gamma * x / sqrt(mean(x^2) + eps)``. Both compute their statistics in
float32 and cast back, so bf16/fp16 activations do not lose the variance to rounding.

``TokenBatchNorm`` is BatchNorm over the (B*T) tokens of a batch. It exists only for the post's LayerNorm vs
BatchNorm comparison (§4.2): its statistics mix tokens of different sentences, padding included, and change
between training and evaluation.

Hook point of ``LayerNorm`` and ``RMSNorm``: ``hook_scale``, the per-token factor ``1/sqrt(var + eps)`` (or
``1/rms``), shape ``(..., 1)``. While it has a hook, LayerNorm computes its statistics step by step instead of
calling the fused ``F.layer_norm`` (equal up to float rounding). A norm's output is already a block's hook point:
``hook_attn_in``/``hook_ffn_in`` (Pre-Norm), ``hook_resid_mid``/``hook_resid_post`` (Post-Norm), ``hook_out`` of
the stack (the final norm).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from anatomy.components.hook_point import HookPoint, hooked
from anatomy.shapes import compute_dtype


class LayerNorm(nn.Module):
    def __init__(self, d_model: int, *, eps: float = 1e-5, bias: bool = True) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model)) if bias else None
        self.hook_scale = HookPoint()  # (..., 1) 1/sqrt(var + eps) per token (computed only when hooked)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if hooked(self, "hook_scale"):
            return self._stepwise(x, compute_dtype(x.dtype))
        if x.dtype is torch.float32 and self.weight.dtype is torch.float32:  # the usual case: nothing to convert
            return torch.layer_norm(x, self.weight.shape, self.weight, self.bias, self.eps)  # F.layer_norm's op
        dt = compute_dtype(x.dtype)
        bias = None if self.bias is None else self.bias.to(dt)
        return F.layer_norm(x.to(dt), self.weight.shape, self.weight.to(dt), bias, self.eps).to(x.dtype)

    def _stepwise(self, x: torch.Tensor, dt: torch.dtype) -> torch.Tensor:
        """``F.layer_norm`` written out, so that the scale passes through ``hook_scale``."""
        xf = x.to(dt)
        centred = xf - xf.mean(-1, keepdim=True)  # (..., D)
        scale = self.hook_scale(torch.rsqrt(centred.pow(2).mean(-1, keepdim=True) + self.eps))  # (..., 1)
        out = centred * scale * self.weight.to(dt)  # (..., D)
        return (out if self.bias is None else out + self.bias.to(dt)).to(x.dtype)


class RMSNorm(nn.Module):
    """``offset``: the scale is ``offset + weight`` (Gemma stores ``weight`` around 0 and scales by ``1 + weight``);
    the weight starts at ``1 - offset``, so a fresh norm scales by 1 either way."""

    def __init__(self, d_model: int, *, eps: float = 1e-6, offset: float = 0.0) -> None:
        super().__init__()
        self.eps, self.offset = eps, float(offset)
        self.weight = nn.Parameter(torch.full((d_model,), 1.0 - self.offset))
        self.hook_scale = HookPoint()  # (..., 1) 1/rms per token

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.to(compute_dtype(x.dtype))
        xf = xf * self.hook_scale(torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps))  # (..., D)
        if self.offset:
            return (xf * (self.offset + self.weight.to(xf.dtype))).to(x.dtype)
        return (self.weight.to(xf.dtype) * xf).to(x.dtype)

    def extra_repr(self) -> str:
        return f"offset={self.offset}" if self.offset else ""


class TokenBatchNorm(nn.Module):
    """BatchNorm1d over all tokens of the batch, for the post's comparison only. ``bias=False``: no shift (beta),
    as LayerNorm's ``bias=False``."""

    def __init__(self, d_model: int, *, eps: float = 1e-5, bias: bool = True) -> None:
        super().__init__()
        self.bn = nn.BatchNorm1d(d_model, eps=eps, affine=True)
        if not bias:
            self.bn.bias = None  # type: ignore[assignment]  # F.batch_norm then scales only

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        out: torch.Tensor = self.bn(x.reshape(-1, shape[-1]))  # (B*T, D)
        return out.reshape(shape)  # (B, T, D)


NORMS: dict[str, type[nn.Module]] = {"layernorm": LayerNorm, "rmsnorm": RMSNorm, "batchnorm": TokenBatchNorm}


def norm_class(name: str) -> type[nn.Module]:
    if name not in NORMS:
        raise ValueError(f"unknown norm {name!r}; valid names: {', '.join(sorted(NORMS))}")
    return NORMS[name]


def make_norm(kind: str, width: int, *, eps: float, bias: bool = True, offset: float = 0.0) -> nn.Module:
    """A norm of ``kind`` over ``width`` features, given the arguments it takes: the one place each rule is written.
    RMSNorm has no shift (beta), so ``bias`` is not its argument; only RMSNorm has Gemma's weight ``offset``."""
    cls = norm_class(kind)
    if cls is RMSNorm:
        return RMSNorm(width, eps=eps, offset=offset)
    if offset:
        raise ValueError(
            f"norm_offset={offset} needs norm='rmsnorm' (only RMSNorm scales by offset + weight), got norm={kind!r}"
        )
    return cls(width, eps=eps, bias=bias)
