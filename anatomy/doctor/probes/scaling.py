"""The scaling probe: the factor the scores are scaled by, fitted from the returned per-head weights (``log w``
per row, up to a constant, against ``q·k`` of the mapped projections), or, when the module returns none, read from
the recorded forward (the softmax's input ÷ the ``q·kᵀ`` that produced it, ``dataflow.py``)."""

from __future__ import annotations

import math

import torch

from anatomy.doctor.probes.state import ProbeResult, ProbeState
from anatomy.doctor.recording.dataflow import scale_verdict
from anatomy.doctor.report.findings import Finding
from anatomy.doctor.report.words import fmt


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
    return [Finding("scaling", "error", en, zh, ev)], None
