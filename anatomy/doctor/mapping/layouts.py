"""Layouts the name-based mapping reads one step short: one more Linear after ``nn.MultiheadAttention``.

``self.proj(self.mha(x, x, x)[0])`` projects twice: ``out_proj`` inside the torch module, then the learner's own
square Linear. Both are linear, so together they are one output projection ``W = W_p W_o``, ``b = W_p b_o + b_p``;
the reference's ``o_proj`` gets that product. The Linear is recognised by dataflow, not by name: it is called
right after the attention module and its input is exactly the attention's output.
"""

from __future__ import annotations

import torch
from torch import nn

from anatomy.doctor.loading.subject import CallError, CheckedModule
from anatomy.doctor.mapping.naming import Hypothesis, Source


def _composed(path: str, lin: nn.Linear, mha_path: str) -> tuple[Source, Source]:
    pre = f"{mha_path}." if mha_path else ""
    note = f"{path} · {pre}out_proj (two projections in a row, multiplied)"

    def weight(params: dict[str, torch.Tensor]) -> torch.Tensor:
        return params[f"{path}.weight"] @ params[f"{pre}out_proj.weight"]

    def bias(params: dict[str, torch.Tensor]) -> torch.Tensor:
        bo = params.get(f"{pre}out_proj.bias")
        b = params[f"{path}.weight"] @ bo if bo is not None else torch.zeros(lin.out_features, dtype=torch.float64)
        return b + params[f"{path}.bias"] if lin.bias is not None else b

    return Source(f"{path}.weight", note, weight), Source(f"{path}.weight", note, bias)


def linear_after_mha(
    subject: CheckedModule, x: torch.Tensor, hyps: list[Hypothesis], scope: str | None, d: int
) -> list[Hypothesis]:
    """The torch-MHA hypotheses with a following square Linear folded into ``o_proj`` (first), or ``hyps``."""
    if not hyps or scope is None or not hyps[0].style.startswith("torch.nn.MultiheadAttention"):
        return hyps
    named = dict(subject.module.named_modules())
    mha = named.get(scope)
    if not isinstance(mha, nn.MultiheadAttention):
        return hyps
    seen: list[tuple[str, object, object]] = []
    handles = [
        m.register_forward_hook(lambda _m, a, o, p=p: seen.append((p, a[0] if a else None, o)))
        for p, m in named.items()
        if p and (p == scope or not p.startswith(scope + "."))
    ]
    try:
        subject.run(x)
    except CallError:
        return hyps
    finally:
        for hd in handles:
            hd.remove()
    at = next((i for i, (p, _, _) in enumerate(seen) if p == scope), None)
    if at is None or at + 1 >= len(seen):
        return hyps
    path, arg, _ = seen[at + 1]
    out = seen[at][2]
    out = out[0] if isinstance(out, tuple) else out
    lin = named.get(path)
    if not (
        isinstance(lin, nn.Linear)
        and lin.in_features == d
        and lin.out_features == d
        and isinstance(arg, torch.Tensor)
        and isinstance(out, torch.Tensor)
        and arg.shape == out.shape
        and torch.equal(arg, out)
    ):
        return hyps
    w, b = _composed(path, lin, scope)
    extra = [
        Hypothesis(
            f"{h.style} + {path} after it (one output projection: {path} · out_proj)",
            {**h.sources, "o_proj.weight": w, "o_proj.bias": b},
            {k: v for k, v in h.modules.items() if k != "o_proj"},
            h.heads,
            h.qk_norm,
        )
        for h in hyps
    ]
    return extra + hyps
