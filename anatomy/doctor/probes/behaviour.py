"""Behavioural probes: small experiments on the learner's module, each returning findings with the numbers.

Most need no weights at all (DESIGN §5): a change to a future token must not move an earlier output (causal leak);
a change to a padded token must not move a real output, and masked weights must be exactly 0 (padding leak);
permuting tokens must permute the outputs and batch rows must not talk to each other (token order: heads or
tokens mixed by a reshape); fully masked rows give no NaN. The scaling probe recovers the pre-softmax logits from
the returned weights (``log w`` per row, up to a constant) and fits them against ``q·k`` of the mapped
projections. Block probes look at the wiring: which norm is called how often, whether the block's output ends
in a norm, and what is left of the input when both sub-layers are silenced.

A probe returns ``(findings, skipped_reason)``; no findings and no reason means it passed.
"""

from __future__ import annotations

import torch

from anatomy.doctor.contract.masks import causal_keep, dependency, max_diff
from anatomy.doctor.contract.precision import tol
from anatomy.doctor.loading.subject import CallError
from anatomy.doctor.probes.block import BLOCK_PROBES
from anatomy.doctor.probes.masking import float16_fill, fully_masked, padding_leak
from anatomy.doctor.probes.scaling import scaling
from anatomy.doctor.probes.state import Probe, ProbeResult, ProbeState
from anatomy.doctor.probes.state import leak as _leak
from anatomy.doctor.report.findings import PROBE_TITLES, Finding
from anatomy.doctor.report.words import fmt

# --- attention and blocks alike --------------------------------------------------------------------------------


def shape(state: ProbeState) -> ProbeResult:
    findings = []
    want = (state.b, state.t, state.d)
    if tuple(state.base.shape) != want:
        return [
            Finding(
                "shape",
                "error",
                f"output has shape {tuple(state.base.shape)}; the input was {want} and the output must keep it "
                "(B, T, D)",
                f"输出形状是 {tuple(state.base.shape)}；输入是 {want}，输出必须保持 (B, T, D)",
                {"input_shape": list(want), "output_shape": list(state.base.shape)},
            )
        ], None
    w = state.base_w
    if w is not None:
        full, avg = (state.b, state.h, state.t, state.t), (state.b, state.t, state.t)
        if tuple(w.shape) not in (full, avg):
            findings.append(
                Finding(
                    "shape",
                    "error",
                    f"weights have shape {tuple(w.shape)}; expected (B, H, T, S) = {full}",
                    f"权重形状是 {tuple(w.shape)}；应为 (B, H, T, S) = {full}",
                    {"weights_shape": list(w.shape), "expected": list(full)},
                )
            )
        elif not state.causal:
            sums = w.sum(-1)
            worst = float((sums - 1).abs().max())
            if not worst <= tol(1e-6):
                findings.append(
                    Finding(
                        "shape",
                        "error",
                        f"rows of the weights sum to {fmt(float(sums.min()))}..{fmt(float(sums.max()))} "
                        "without any mask, not 1",
                        f"不加 mask 时权重每行之和为 {fmt(float(sums.min()))}..{fmt(float(sums.max()))}，而不是 1",
                        {"row_sum_min": float(sums.min()), "row_sum_max": float(sums.max())},
                    )
                )
    return findings, None


def finite(state: ProbeState) -> ProbeResult:
    bad = int((~torch.isfinite(state.base)).sum())
    if bad:
        return [
            Finding(
                "finite",
                "error",
                f"{bad} of {state.base.numel()} outputs are NaN or inf without any mask",
                f"不加 mask 时 {state.base.numel()} 个输出中有 {bad} 个是 NaN 或 inf",
                {"non_finite": bad, "of": state.base.numel()},
            )
        ], None
    return [], None


def _worst_future(dep: torch.Tensor) -> tuple[float, int, int, int]:
    t = dep.shape[0]
    future = torch.ones(t, t, dtype=torch.bool).triu(1)
    vals = dep.masked_fill(~future, 0.0)
    idx = int(vals.argmax())
    return float(vals.max()), idx // t, idx % t, int((vals > 0).sum())


def causal_leak(state: ProbeState) -> ProbeResult:
    if state.causal:
        dep, how = state.dep, "plain"
    elif state.causal_mask is not None:
        mask = state.causal_mask.make(causal_keep(state.b, state.t), state.x.dtype)
        try:
            dep, how = dependency(state.subject, state.x, mask), "mask"
        except CallError as err:
            return [], (f"forward raised with a causal mask: {err}", f"传入因果 mask 时 forward 报错：{err}")
    else:
        return [], (
            "not causal; pass --causal for a decoder's self-attention, or let forward take a (T, S) mask",
            "不是因果注意力；decoder 的自注意力请加 --causal，或让 forward 接受 (T, S) 的 mask",
        )
    if dep is None:  # --causal, but the plain output is not finite (check._conventions): nothing to compare
        return [], (
            "cannot tell: the plain forward's output is not finite, so a change to a future token cannot be measured",
            "无法判断：普通前向的输出不是有限值，无法测量改变未来 token 的影响",
        )
    worst, i, j, n = _worst_future(dep)
    if _leak(worst, state):
        where = "" if how == "plain" else " under a causal mask"
        return [
            Finding(
                "causal_leak",
                "error",
                f"changing token {j} moved the output at position {i} by {fmt(worst)}{where}: an earlier "
                f"position sees the future ({n} (query, future key) pairs leak)",
                f"改变第 {j} 个 token 使第 {i} 个位置的输出变化了 {fmt(worst)}：前面的位置看到了未来"
                f"（{n} 对 (query, 未来 key) 泄漏）",
                {"query": i, "changed_token": j, "max_change": worst, "leaking_pairs": n},
            )
        ], None
    return [], None


def positions(state: ProbeState) -> str:
    """Do the outputs depend on where the tokens sit, and how? Swap tokens 0 and 1: without positions inside,
    every later query sees the same *set* of keys (causal or not), so outputs 2.. do not move ("none"). When they
    move, put two hidden keys in front (a left-padding mask): every position shifts by 2, and a relative scheme
    (RoPE, ALiBi) leaves the real outputs unchanged ("relative"); an absolute one, or tokens mixed by a reshape,
    does not ("absolute"). Without a mask that hides the new keys (none, or one the module ignores): "dependent"."""
    t = state.t
    if t < 3:
        return "none"
    swap = torch.arange(t)
    swap[0], swap[1] = 1, 0
    try:
        out, _ = state.subject.run(state.x[:, swap])
    except CallError:
        return "dependent"
    if not _leak(max_diff(out[:, 2:], state.base[:, 2:]), state):
        return "none"
    if state.mask is None:
        return "dependent"
    keep = torch.ones(state.b, t + 2, t + 2, dtype=torch.bool)
    keep[:, :, :2] = False  # the two new keys are hidden from every query
    mask = state.mask.make(keep, state.x.dtype)
    if mask is None:
        return "dependent"
    pads = torch.randn(state.b, 2, state.d, generator=torch.Generator().manual_seed(11), dtype=state.x.dtype)
    longer = torch.cat([pads, state.x], 1)
    try:
        shifted, _ = state.subject.run(longer, mask)
        unmasked, _ = state.subject.run(longer)
    except CallError:
        return "dependent"
    if max_diff(shifted, unmasked) == 0.0:  # the mask is ignored: the new keys were not hidden, nothing learned
        return "dependent"
    return "absolute" if _leak(max_diff(shifted[:, 2:], state.base), state) else "relative"


def token_order(state: ProbeState) -> ProbeResult:
    if state.positional is not None:
        return [], (
            f"positions enter attention ({state.positional}): permuting the tokens changes the outputs by "
            "design, and the reference with that scheme matches",
            f"位置信息进入了注意力（{state.positional}）：打乱 token 顺序本来就会改变输出，"
            "且带该位置方案的参考实现与之吻合",
        )
    if state.positions == "relative":
        return [], (
            "positions enter attention relatively (shifting every position by 2 leaves the outputs "
            "unchanged, as RoPE or ALiBi would): permuting the tokens changes the outputs by design",
            "位置信息以相对方式进入注意力（所有位置整体平移 2 时输出不变，与 RoPE、ALiBi 一致）：打乱 token "
            "顺序本来就会改变输出",
        )
    if state.causal:
        return [], ("a causal module is not permutation-equivariant", "因果模块本来就不满足置换等变")
    perm = torch.roll(torch.arange(state.t), 2)
    try:
        out, _ = state.subject.run(state.x[:, perm])
    except CallError as err:
        return [], (str(err), str(err))
    diff = max_diff(out, state.base[:, perm])
    if _leak(diff, state):
        return [
            Finding(
                "token_order",
                "error",
                f"permuting the tokens did not permute the outputs (max |Δ| = {fmt(diff)}): without positional "
                "encoding attention must not care where a token sits; heads or tokens are being mixed",
                f"打乱 token 顺序后输出没有按同样的顺序打乱（最大 |Δ| = {fmt(diff)}）：没有位置编码时注意力"
                "不该在乎 token 的位置；头或 token 被混在了一起",
                {"max_diff": diff, "permutation": perm.tolist()},
            )
        ], None
    return [], None


def batch_independence(state: ProbeState) -> ProbeResult:
    x2 = state.x.clone()
    x2[1:] = torch.randn(x2[1:].shape, generator=torch.Generator().manual_seed(3), dtype=x2.dtype)
    try:
        out, _ = state.subject.run(x2)
    except CallError as err:
        return [], (str(err), str(err))
    diff = max_diff(out[:1], state.base[:1])
    if _leak(diff, state):
        return [
            Finding(
                "batch_independence",
                "error",
                f"changing sequence 1 moved the outputs of sequence 0 by {fmt(diff)}: the rows of a batch "
                "must not see each other",
                f"改变第 1 个序列使第 0 个序列的输出变化了 {fmt(diff)}：batch 里的各个序列不应互相看到",
                {"max_change": diff},
            )
        ], None
    return [], None


# "scaling" lives in scaling.py (it imports ProbeState from here); run_all puts it in its place
ATTENTION_PROBES: dict[str, Probe | None] = {
    "shape": shape,
    "finite": finite,
    "causal_leak": causal_leak,
    "padding_leak": padding_leak,
    "token_order": token_order,
    "batch_independence": batch_independence,
    "scaling": None,
    "fully_masked": fully_masked,
    "float16_fill": float16_fill,
}


def run_all(state: ProbeState) -> tuple[list[Finding], list[str], list[dict[str, str]]]:

    probes = {**ATTENTION_PROBES, "scaling": scaling}  # scaling.py keeps its place in the order
    if state.kind == "block":
        probes.update(BLOCK_PROBES)
    findings, passed, skipped = [], [], []
    for name, probe in probes.items():
        title = PROBE_TITLES.get(name, (name, name))
        state.subject.stage = (f"the {title[0]} probe", f"{title[1]}探针")
        assert probe is not None  # the one None in ATTENTION_PROBES ("scaling") was replaced above
        found, skip = probe(state)
        findings += found
        if skip is not None:
            skipped.append({"probe": name, "en": skip[0], "zh": skip[1]})
        elif not found:
            passed.append(name)
    return findings, passed, skipped
