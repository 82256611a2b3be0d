"""Where the learner's output first differs from the reference's (the walk through the mapped sub-modules), and
the reference's raw scores ``q kᵀ`` for the scaling probe."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from anatomy.components.kernels import repeat_kv
from anatomy.doctor.contract.masks import max_diff
from anatomy.doctor.diagnosis.references import References, Scenario
from anatomy.doctor.loading.subject import CallError, CheckedModule
from anatomy.doctor.mapping.naming import Hypothesis

# --- where the first difference appears ---------------------------------------------------------------------------


Log = list[tuple[str, torch.Tensor | None, torch.Tensor | None]]  # (module, first input, output) per call


def _record(module: nn.Module, log: Log, name: str) -> RemovableHandle:
    def hook(_mod: nn.Module, args: tuple[object, ...], out: object) -> None:
        first = args[0] if args and isinstance(args[0], torch.Tensor) else None
        log.append((name, first, out if isinstance(out, torch.Tensor) else None))

    return module.register_forward_hook(hook)


def first_difference(
    subject: CheckedModule, ref: nn.Module, hyp: Hypothesis, scenarios: list[Scenario], tol: float
) -> dict[str, Any]:
    """Walk the reference's mapped sub-modules in call order; the first input or output that differs is named."""
    sc = next((s for s in scenarios if max_diff(s.out, References.run(ref, s), s.rows) > tol), scenarios[0])
    user_named, ref_named = dict(subject.module.named_modules()), dict(ref.named_modules())
    user_log: Log = []
    ref_log: Log = []
    handles = []
    try:
        for r, u in hyp.modules.items():
            if r in ref_named and u in user_named:
                handles.append(_record(ref_named[r], ref_log, r))
        for u in set(hyp.modules.values()):
            if u in user_named:
                handles.append(_record(user_named[u], user_log, u))
        attn = References.attention(ref)
        handles.append(_record(attn.hook_weights, ref_log, "weights"))
        ref_out = References.run(ref, sc)
        try:
            user_out, user_w = subject.run(sc.x, sc.user_mask)
        except CallError:
            user_out, user_w = sc.out, sc.user_weights
    finally:
        for hd in handles:
            hd.remove()
    rows = sc.rows
    matched: list[str] = []
    used: dict[str, int] = {}
    user_calls: dict[str, list[tuple[torch.Tensor | None, torch.Tensor | None]]] = {}
    for name, i, o in user_log:
        user_calls.setdefault(name, []).append((i, o))
    for name, ref_in, ref_o in ref_log:
        if name == "weights":
            if user_w is None or ref_o is None or user_w.shape != ref_o.shape:
                continue
            d = max_diff(user_w, hyp.learner_heads(ref_o))
            if d > tol:
                return {
                    "scenario": sc.name,
                    "where": "attention weights",
                    "where_zh": "注意力权重",
                    "user": None,
                    "reference": "hook_weights",
                    "max_abs_diff": d,
                    "matching_before": matched,
                }
            matched.append("attention weights")
            continue
        u = hyp.modules[name]
        k = used.get(u, 0)
        used[u] = k + 1
        calls = user_calls.get(u, [])
        if k >= len(calls):
            return {
                "scenario": sc.name,
                "where": f"{u} is not called where {name} is",
                "where_zh": f"{u} 没有在 {name} 的位置被调用",
                "user": u,
                "reference": name,
                "max_abs_diff": None,
                "matching_before": matched,
            }
        u_in, u_out = calls[k]
        if name.endswith("q_proj") and ref_o is not None:  # regrouped query heads: compare in the learner's order
            ref_o = hyp.learner_features(ref_o)
        if name.endswith("o_proj") and ref_in is not None:
            ref_in = hyp.learner_features(ref_in)
        if name.endswith(("q_norm", "k_norm")):  # ours (B, H, T, Dh); yours often (B, T, H, Dh) or (B, T, D)
            ref_in, ref_o = (_learner_layout(hyp, name, r, u) for r, u in ((ref_in, u_in), (ref_o, u_out)))
        for what, a, b in (("input", u_in, ref_in), ("output", u_out, ref_o)):
            if a is None or b is None or a.shape != b.shape:
                continue
            d = max_diff(a, b, rows if a.dim() == 3 and a.shape[:2] == rows.shape else None)
            if d > tol:
                return {
                    "scenario": sc.name,
                    "where": f"{what} of {u}",
                    "where_zh": f"{u} 的{'输入' if what == 'input' else '输出'}",
                    "user": u,
                    "reference": name,
                    "max_abs_diff": d,
                    "matching_before": matched,
                }
        matched.append(u)
    return {
        "scenario": sc.name,
        "where": "after the last mapped sub-module (the output)",
        "where_zh": "最后一个对应的子模块之后（输出）",
        "user": None,
        "reference": None,
        "max_abs_diff": max_diff(user_out, ref_out, rows),
        "matching_before": matched,
    }


def _learner_layout(
    hyp: Hypothesis, name: str, ref: torch.Tensor | None, user: torch.Tensor | None
) -> torch.Tensor | None:
    """A reference q/k ``(B, H, T, Dh)`` in the learner's layout: as is when the shapes agree, else read token-major
    (``(B, T, H, Dh)``, or ``(B, T, H·Dh)`` for a norm over all heads) when the sizes do."""
    if ref is None or user is None or ref.dim() != 4:
        return ref
    if name.endswith("q_norm"):  # regrouped query heads: in the learner's order
        ref = hyp.learner_heads(ref)
    if ref.shape == user.shape or ref.numel() != user.numel():
        return ref
    return ref.transpose(1, 2).reshape(user.shape)


def raw_scores(ref: nn.Module, sc: Scenario) -> torch.Tensor:
    """``q k^T`` per head ``(B, H, T, S)``, unscaled, as the reference computes q and k for ``sc``."""
    attn, seen = References.attention(ref), dict[str, torch.Tensor]()
    hs = [
        attn.hook_q.register_forward_hook(lambda m, a, o: seen.__setitem__("q", o)),
        attn.hook_k.register_forward_hook(lambda m, a, o: seen.__setitem__("k", o)),
    ]
    try:
        References.run(ref, sc)
    finally:
        for hd in hs:
            hd.remove()
    k = repeat_kv(seen["k"], seen["q"].shape[1])  # (B, H, S, Dh): each key/value head serves its group
    return seen["q"] @ k.transpose(-2, -1)  # (B, H, T, S)
