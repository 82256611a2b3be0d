"""An attention module that holds its own norm: vit-pytorch's ``Attention`` normalises its input first
(``attn(norm(x))``, the residual in the caller's loop); attention-is-all-you-need-pytorch's ``MultiHeadAttention``
adds its residual and normalises (``norm(q + attn(q, k, v))``). Neither is a block (there is no feed-forward), so
it is checked as an attention, against our ``MultiHeadAttention`` inside :class:`NormedAttention`: the learner's
norm (kind, eps, gain, bias) before it or after its residual. Both placements are tried as variants of the
attention references; the report names the one that matches.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from anatomy.doctor.mapping.naming import Hypothesis, _p
from anatomy.doctor.mapping.norm_fit import NormInfo, StdNorm
from anatomy.doctor.mapping.norms import is_norm, norm_eps, norm_kind, pointwise

INSIDE = {
    "inner-pre": "the attention holds its own pre-norm: attn(norm(x)), the residual outside it",
    "inner-post": "the attention holds its own residual and post-norm: norm(x + attn(x))",
}


@dataclass
class OwnNorm:
    path: str
    kind: str  # "layernorm" | "rmsnorm"
    form: str  # "layernorm" | "rmsnorm" | "unbiased_std"
    eps: float
    weight: str | None  # the learner's gain parameter (None: gain 1)
    bias: str | None


def find_own_norm(
    module: nn.Module, d: int, attn_paths: set[str], found: dict[str, NormInfo], skip: set[str | None]
) -> OwnNorm | None:
    """The one ``D``-wide norm of a module that has nothing besides its attention projections (no feed-forward
    Linear or pointwise Conv1d), or None."""
    named = dict(module.named_modules())
    dense = [p for p, m in named.items() if (isinstance(m, nn.Linear) or pointwise(m)) and p not in attn_paths]
    if dense:
        return None
    norms = [p for p, m in named.items() if p not in skip and (p in found or is_norm(m, d))]
    if len(norms) != 1:
        return None
    p = norms[0]
    info = found.get(p)
    if info is not None:
        return OwnNorm(p, info.kind, info.form, info.eps, info.weight, info.bias)
    m = named[p]
    pre = f"{p}." if p else ""
    weight = f"{pre}weight" if isinstance(getattr(m, "weight", None), torch.Tensor) else None
    bias = f"{pre}bias" if isinstance(getattr(m, "bias", None), torch.Tensor) else None
    kind = norm_kind(m)
    return OwnNorm(p, kind, kind, norm_eps(m), weight, bias)


class NormedAttention(nn.Module):
    """``attn(norm(x))`` (``"inner-pre"``) or ``norm(x + attn(x))`` (``"inner-post"``), same call as ours."""

    def __init__(self, attn: nn.Module, norm: nn.Module, placement: str) -> None:
        super().__init__()
        self.attn, self.norm, self.placement = attn, norm, placement

    def forward(self, x: torch.Tensor, **kw: object) -> tuple[torch.Tensor, torch.Tensor | None]:
        if self.placement == "inner-pre":
            result: tuple[torch.Tensor, torch.Tensor | None] = self.attn(self.norm(x), **kw)
            return result
        out, weights = self.attn(x, **kw)
        return self.norm(x + out), weights


def make_norm(own: OwnNorm, d: int) -> nn.Module:
    if own.form == "unbiased_std":
        return StdNorm(d, own.eps)
    return nn.RMSNorm(d, eps=own.eps) if own.kind == "rmsnorm" else nn.LayerNorm(d, eps=own.eps)


def wrapped_hypothesis(hyp: Hypothesis, own: OwnNorm) -> Hypothesis:
    """``hyp`` read onto :class:`NormedAttention`: ``attn.*`` and the learner's norm on ``norm.*``."""
    inner = hyp.prefixed("attn.")
    src = dict(inner.sources)
    for name, user in (("weight", own.weight), ("bias", own.bias)):
        if user is not None:
            src[f"norm.{name}"] = _p(user)
    return Hypothesis(inner.style, src, {**inner.modules, "norm": own.path}, inner.heads, inner.qk_norm)


def wrap(attn: nn.Module, own: OwnNorm, d: int, placement: str) -> nn.Module:
    return NormedAttention(attn, make_norm(own, d), placement)
