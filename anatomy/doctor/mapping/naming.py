"""How the doctor reads a learner's names: the roles q/k/v/o behind the affixes learners put around them, and the
record of one reading (a *hypothesis*: reference parameter → the learner's parameter that feeds it, and how)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn

Reader = Callable[[dict[str, torch.Tensor]], torch.Tensor]  # the learner's parameters → one reference tensor
ROLES = {
    "q": {"q", "query", "queries"},
    "k": {"k", "key", "keys"},
    "v": {"v", "value", "values"},
    "o": {"o", "out", "output", "outs"},
    "qkv": {"qkv", "kqv", "in", "attn", "qkvs", "querykeyvalue"},
}
AFFIXES = sorted(
    {
        "linear",
        "proj",
        "projection",
        "weight",
        "weights",
        "lin",
        "dense",
        "layer",
        "net",
        "matrix",
        "mat",
        "to",
        "fc",
        "w",
        "l",
        "c",
        "in",
        "s",
        "head",
        "heads",
        "self",
    },
    key=len,
    reverse=True,
)
ATTN_KEYS = ("q_proj", "k_proj", "v_proj", "o_proj")


def core(name: str) -> str:
    """``W_query_proj`` → ``query``: strip affixes while what is left is not a known core."""
    s = re.sub(r"[^a-z0-9]", "", name.lower())
    cores = set().union(*ROLES.values())
    for _ in range(4):
        if s in cores:
            return s
        for a in AFFIXES:
            if s.startswith(a) and len(s) > len(a):
                s = s[len(a) :]
                break
            if s.endswith(a) and len(s) > len(a):
                s = s[: -len(a)]
                break
        else:
            return s
    return s


def role_of(name: str) -> str | None:
    c = core(name)
    return next((r for r, names in ROLES.items() if c in names), None)


@dataclass
class Source:
    user: str  # the learner's parameter name
    note: str  # how it is read: "", "transposed", "rows 16:32", ...
    fn: Reader = field(repr=False)


@dataclass
class QKNorm:
    """The learner's QK-norm, as the reference takes it: ``MultiHeadAttention(qk_norm=kind, norm_eps=eps)``."""

    kind: str  # "rmsnorm" | "layernorm"
    eps: float
    q: str | None  # the learner's norm modules (None: named by --map through a bare Parameter)
    k: str | None
    width: int  # Dh: per head, weights mapped; D: over all heads before the split, which ours cannot carry

    def to_dict(self) -> dict[str, object]:
        return {"kind": self.kind, "eps": self.eps, "q_norm": self.q, "k_norm": self.k, "width": self.width}


@dataclass
class Hypothesis:
    style: str
    sources: dict[str, Source]  # reference parameter name → source
    modules: dict[str, str] = field(default_factory=dict)  # reference module → learner module (for hooks)
    heads: list[int] | None = None  # our query head j is the learner's head heads[j] (None: the same order)
    qk_norm: QKNorm | None = None  # the reference normalises q and k per head (None: no QK-norm)

    def prefixed(self, prefix: str) -> Hypothesis:
        return Hypothesis(
            self.style,
            {prefix + k: v for k, v in self.sources.items()},
            {prefix + k: v for k, v in self.modules.items()},
            self.heads,
            self.qk_norm,
        )

    def learner_heads(self, t: torch.Tensor) -> torch.Tensor:
        """``(B, H, ...)`` per head in our order → in the learner's order (to compare with its weights)."""
        if self.heads is None:
            return t
        out = torch.empty_like(t)
        out[:, self.heads] = t
        return out

    def learner_features(self, t: torch.Tensor) -> torch.Tensor:
        """``(..., H*Dh)`` query features (q_proj's output, o_proj's input) in our head order → the learner's."""
        if self.heads is None:
            return t
        ours = t.unflatten(-1, (len(self.heads), -1))  # type: ignore[no-untyped-call]  # (..., H, Dh); torch's Tensor.unflatten is unannotated
        out = torch.empty_like(ours)
        out[..., self.heads, :] = ours
        return out.flatten(-2)


def _p(name: str, f: Callable[..., torch.Tensor] = lambda t: t, note: str = "") -> Source:
    """The learner's parameter ``name`` read through ``f(tensor)`` (its other arguments, if any, have defaults)."""
    return Source(name, note, lambda params: f(params[name]))


def _linear(prefix: str, path: str, lin: nn.Linear) -> dict[str, Source]:
    out = {f"{prefix}.weight": _p(f"{path}.weight")}
    if lin.bias is not None:
        out[f"{prefix}.bias"] = _p(f"{path}.bias")
    return out
