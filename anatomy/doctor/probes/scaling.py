"""The scaling probe: the factor the scores are scaled by, fitted from the returned per-head weights (``log w``
per row, up to a constant, against ``q·k`` of the mapped projections), or, when the module returns none, read from
the recorded forward (the softmax's input ÷ the ``q·kᵀ`` that produced it, ``dataflow.py``)."""

from __future__ import annotations

import math
from typing import Any

import torch

from anatomy.doctor.probes.state import ProbeResult, ProbeState
from anatomy.doctor.recording.cores import Core, attention_cores
from anatomy.doctor.recording.dataflow import Observation, scale_verdict
from anatomy.doctor.report.findings import Finding
from anatomy.doctor.report.words import fmt
from anatomy.tracing.steps import MATMUL_OPS, Recording, Step

NORM_OPS = {"rms_norm", "layer_norm", "group_norm", "normalize", "rsqrt", "norm", "linalg_vector_norm", "vector_norm"}
PROJECTION_OPS = {"linear", "addmm"}


def _contracted(rec: Recording, core: Core) -> list[tuple[Step | None, int, int]]:
    """``(producer, which input, contracted axis)`` of q and of k in the first attention's scores."""
    if core.scores is None:  # fused sdpa: q, k are its first two inputs, each contracted over its last axis
        return [(rec.producer(core.softmax, i), i, -1) for i in (0, 1)]
    sc = core.scores
    n = len(sc.inputs)
    if sc.op == "einsum":
        eq = str(sc.extra.get("equation", "")).replace(" ", "")
        if "->" not in eq or "..." in eq or n != 2:
            return []
        lhs, out = eq.split("->")
        parts = lhs.split(",")
        if len(parts) != 2:
            return []
        shared = [c for c in parts[0] if c in parts[1] and c not in out]
        if len(shared) != 1:
            return []
        return [(rec.producer(sc, i), i, parts[i].index(shared[0])) for i in (0, 1)]
    if n < 2:
        return []
    return [(rec.producer(sc, n - 2), n - 2, -1), (rec.producer(sc, n - 1), n - 1, -2)]


def _normed_by_op(rec: Recording, step: Step | None) -> bool:
    """A norm (``rms_norm``, ``layer_norm``, ``normalize``, a hand-written ``rsqrt``) on the way back from ``step``
    to the projection that made it."""
    for _ in range(40):
        if step is None or step.op in PROJECTION_OPS or (step.op in MATMUL_OPS and step.params):
            return False
        if step.op in NORM_OPS:
            return True
        step = rec.producer(step, next((i for i, t in enumerate(step.inputs) if t.source.startswith("step ")), 0))
    return False


def _normed_by_value(step: Step | None, shape: tuple[int, ...], axis: int) -> bool:
    """Every row of the tensor, over the contracted axis, has the same length (within 2%): a norm fixed it."""
    if step is None or len(step.outputs) != 1 or step.value is None or tuple(step.value.shape) != shape:
        return False
    lengths = step.value.double().norm(dim=axis)
    top = float(lengths.max())
    return top > 0 and float(lengths.min()) > 0.98 * top


def qk_normed(obs: Observation | None) -> bool:
    """QK-norm: both q and k are normalised before the scores (Qwen3, OLMo2, nanochat), so ``|q|`` and ``|k|`` are
    fixed and the scale of the scores is a temperature the design picks, not a forgotten ``sqrt(d_k)``."""
    rec = obs.rec if obs is not None else None
    if rec is None:
        return False
    cores = attention_cores(rec)
    if not cores:
        return False
    core = cores[0]
    sides = _contracted(rec, core)
    if len(sides) != 2:
        return False
    at = core.scores or core.softmax
    return all(
        _normed_by_op(rec, prod) or _normed_by_value(prod, tuple(at.inputs[i].shape), axis) for prod, i, axis in sides
    )


def temperature(s: float, state: ProbeState, ev: dict[str, Any], how: str, how_zh: str) -> Finding:
    """A non-standard scale on QK-normed q and k: a named design (a temperature), a warning, never an error."""
    unit = 1 / math.sqrt(state.dh)
    ev = {**ev, "qk_norm": True, "times_one_over_sqrt_d_k": s / unit}
    en = (
        f"q and k are normalised before the scores (QK-norm), and the scores are scaled by {fmt(s)} ({how}) = "
        f"{fmt(s / unit)} × 1/sqrt(d_k) (1/sqrt(d_k) = {fmt(unit)}): with |q| and |k| fixed by the norm, the scale "
        "is a temperature the design chooses (nanochat multiplies q and k by 1.2 each), not a forgotten sqrt(d_k); "
        "make sure it is the one you meant"
    )
    zh = (
        f"q 与 k 在计算分数前已归一化（QK-norm），分数的缩放系数为 {fmt(s)}（{how_zh}）= {fmt(s / unit)} × 1/sqrt(d_k)"
        f"（1/sqrt(d_k) = {fmt(unit)}）：|q| 与 |k| 已由归一化固定，缩放是设计选择的温度"
        "（nanochat 把 q、k 各乘以 1.2），并非漏除 sqrt(d_k)；请确认这是你想要的值"
    )
    return Finding("scaling", "warning", en, zh, ev)


def observed_scaling(state: ProbeState) -> ProbeResult | None:
    """The scale read from the recorded forward: the softmax's input ÷ the q·kᵀ that produced it."""
    verdict = scale_verdict(state.observation, state.d, state.h) if state.observation is not None else None
    if verdict is None:
        return None
    fault, ev = verdict
    if fault is None:
        return [], None
    s = ev["observed_scale"]
    at = f" (line {ev['line']} `{ev['source']}`)" if ev.get("line") else ""
    at_zh = f"（第 {ev['line']} 行 `{ev['source']}`）" if ev.get("line") else ""
    en = (
        f"the scores are scaled by {fmt(s)}{at}, read from the recorded forward as the softmax's input ÷ q·kᵀ; "
        f"1/sqrt(d_k) = {fmt(ev['one_over_sqrt_d_k'])}, 1/sqrt(d_model) = {fmt(ev['one_over_sqrt_d_model'])}"
    )
    zh = (
        f"分数的缩放系数为 {fmt(s)}{at_zh}（由记录的 forward 读出：softmax 的输入 ÷ q·kᵀ）；"
        f"1/sqrt(d_k) = {fmt(ev['one_over_sqrt_d_k'])}，1/sqrt(d_model) = {fmt(ev['one_over_sqrt_d_model'])}"
    )
    if fault == "other" and qk_normed(state.observation):
        return [temperature(s, state, ev, f"read from the recorded forward{at}", f"由记录的 forward 读出{at_zh}")], None
    return [Finding("scaling", "error", en, zh, ev, fault=None if fault == "other" else fault)], None


def scaling(state: ProbeState) -> ProbeResult:
    w = state.base_w
    if w is None or w.dim() != 4 or tuple(w.shape) != (state.b, state.h, state.t, state.t):
        observed = observed_scaling(state)  # None: the recording shows no scale either
        if observed is not None:
            return observed
        return [], (
            "needs per-head weights (B, H, T, S) from forward; the diagnosis checks the scale instead",
            "需要 forward 返回每个头的权重 (B, H, T, S)；缩放改由差分诊断检查",
        )
    if state.dh == 1 or state.h == 1:
        return [], ("d_k and d_model give the same scale here", "此处 d_k 与 d_model 给出相同的缩放")
    raw = state.raw_scores() if state.raw_scores is not None else None
    if raw is None:
        return [], ("your q/k projections were not mapped", "未能对应你的 q/k 投影")
    seen = w > 0  # log w is the logit up to a per-row constant wherever the weight is positive
    rows = seen.sum(-1, keepdim=True)
    if not bool((rows >= 2).any()):
        return [], ("needs rows with at least two visible keys", "需要至少有两个可见 key 的行")
    n = rows.clamp_min(1)
    log_w = torch.log(w.clamp_min(1e-300)).masked_fill(~seen, 0.0)
    logits = (log_w - log_w.sum(-1, keepdim=True) / n).masked_fill(~seen, 0.0)
    raw = raw.masked_fill(~seen, 0.0)
    r = (raw - raw.sum(-1, keepdim=True) / n).masked_fill(~seen, 0.0)
    logits, r = logits[seen], r[seen]
    s = float((logits * r).sum() / (r * r).sum())
    resid = float(((logits - s * r) ** 2).sum() / (logits**2).sum().clamp_min(1e-300))
    ev = {
        "fitted_scale": s,
        "one_over_sqrt_d_k": 1 / math.sqrt(state.dh),
        "one_over_sqrt_d_model": 1 / math.sqrt(state.d),
        "logit_std": float(logits.std()),
        "logit_std_with_1_over_sqrt_d_k": float(r.std()) / math.sqrt(state.dh),
        "fit_r2": 1 - resid,
    }
    if resid > 1e-3:
        observed = observed_scaling(state) if qk_normed(state.observation) else None
        if observed is not None:  # the mapped projections' q·k is not the normed one: the recording shows the scale
            return observed
        return [], (
            f"inconclusive: log-weights do not follow q·k of the mapped projections (R² = {fmt(1 - resid)})",
            f"无法判断：log 权重与对应投影的 q·k 不成比例（R² = {fmt(1 - resid)}）",
        )
    verdicts = ((1 / math.sqrt(state.dh), None), (1.0, "no_scaling"), (1 / math.sqrt(state.d), "scale_by_d_model"))
    want_s, got_std, want_std = (
        fmt(1 / math.sqrt(state.dh)),
        fmt(ev["logit_std"]),
        fmt(ev["logit_std_with_1_over_sqrt_d_k"]),
    )
    en = (
        f"scores are scaled by {fmt(s)} (fitted from log-weights); 1/sqrt(d_k) = {want_s}; the logits' std is "
        f"{got_std} where {want_std} was due"
    )
    zh = (
        f"分数的缩放系数为 {fmt(s)}（由 log 权重拟合）；1/sqrt(d_k) = {want_s}；"
        f"logit 标准差为 {got_std}，应为 {want_std}"
    )
    for want, fault in verdicts:
        if abs(s / want - 1) < 1e-4:
            return ([], None) if fault is None else ([Finding("scaling", "error", en, zh, ev, fault=fault)], None)
    if qk_normed(state.observation):
        return [temperature(s, state, ev, "fitted from log-weights", "由 log 权重拟合")], None
    return [Finding("scaling", "error", en, zh, ev)], None
