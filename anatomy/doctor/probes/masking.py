"""The probes of the mask: a change to a padded token must not move a real output and masked weights must be exactly
0 (padding leak, in every accepted layout), a fully masked row must not give NaN, and the fill must fit in float16.
Each returns ``(findings, skipped_reason)`` as the probes in ``behaviour.py``."""

from __future__ import annotations

import copy
import math

import torch
from torch import nn

from anatomy.doctor.contract.masks import MaskCandidate, max_diff, pad_keep, padding_keep
from anatomy.doctor.contract.precision import tol
from anatomy.doctor.loading.subject import CallError
from anatomy.doctor.probes.state import ProbeResult, ProbeState, Skip
from anatomy.doctor.probes.state import leak as _leak
from anatomy.doctor.report.findings import Finding
from anatomy.doctor.report.words import SENSE_SHORT, fmt


def padding_leak(state: ProbeState) -> ProbeResult:
    if state.mask is None:
        return [], _no_mask(state)
    t = state.t
    keep, padded = padding_keep(state.b, t, state.causal)  # the diagnosis pads the same side (masks.py)
    real = keep[:, 0]  # (B, T)
    mask = state.mask.make(keep, state.x.dtype)
    x2 = state.x.clone()
    x2[1, padded] += 3.0 * torch.randn(2, state.d, generator=torch.Generator().manual_seed(5), dtype=state.x.dtype)
    try:
        out, w = state.subject.run(state.x, mask)
        out2, _ = state.subject.run(x2, mask)
    except CallError as err:
        return [], (f"forward raised with a padding mask: {err}", f"传入 padding mask 时 forward 报错：{err}")
    findings = []
    leak = max_diff(out, out2, real)
    ev = {
        "max_change_of_real_outputs": leak,
        "padded_tokens": [1, padded.start, padded.stop - 1],
        "padding": "left" if state.causal else "right",
    }
    hidden_w = None
    if w is not None and w.shape[-2:] == (t, t):
        w4 = w if w.dim() == 4 else w[:, None]
        rows = real[:, None, :, None].expand_as(w4)  # real query rows
        cols = (~keep[:, None]).expand_as(w4)  # hidden keys
        hidden_w = float(w4[rows & cols].abs().nan_to_num(math.inf).max())
        ev["max_weight_on_padded_keys"] = hidden_w
    no_effect = max_diff(out, state.base) == 0.0
    ev["mask_has_effect"] = not no_effect
    if state.mask_leaks:
        ev["every_convention_leaks"] = state.mask_leaks
    every = (
        f"every mask convention the module accepts leaks (all {len(state.mask_leaks)} that change the output): "
        "the mask itself does not hide the padding (a fill too small to matter, applied after the softmax, "
        "or tokens mixed by a reshape?); "
        if state.mask_leaks
        else ""
    )
    every_zh = (
        f"模块接受的每一种 mask 约定都泄漏（起作用的 {len(state.mask_leaks)} 种全部如此）："
        "mask 本身没有遮住 padding（填充值太小不起作用，"
        "在 softmax 之后才施加，或 reshape 把 token 混在了一起？）；"
        if state.mask_leaks
        else ""
    )
    if _leak(leak, state) or (hidden_w is not None and hidden_w > 0):
        findings.append(
            Finding(
                "padding_leak",
                "error",
                every
                + (
                    "the mask has no effect at all (the output with a padding mask equals the one without); "
                    if no_effect
                    else ""
                )
                + f"changing the padded tokens of sequence 1 moved its real outputs by {fmt(leak)}"
                + (
                    f"; real queries put weight up to {fmt(hidden_w)} on padded keys (must be exactly 0)"
                    if hidden_w
                    else ""
                ),
                every_zh
                + ("mask 完全没有作用（加 padding mask 与不加时输出相同）；" if no_effect else "")
                + f"改变第 1 个序列里的 padding token，使它的真实输出变化了 {fmt(leak)}"
                + (f"；真实 query 在 padding key 上的权重最大为 {fmt(hidden_w)}（必须恰好为 0）" if hidden_w else ""),
                ev,
                fault=_on_queries(state, out, real, no_effect),
            )
        )
    if w is not None and w.shape[-2:] == (t, t) and not state.causal:
        sums = (w if w.dim() == 4 else w[:, None]).sum(-1)  # (B, H|1, T)
        sums = sums.permute(0, 2, 1)[real]  # real query rows
        lo, hi = float(sums.min()), float(sums.max())
        if not (abs(lo - 1) <= tol(1e-6) and abs(hi - 1) <= tol(1e-6)):
            findings.append(
                Finding(
                    "padding_leak",
                    "error",
                    f"with a padding mask the weights of real queries sum to {fmt(lo)}..{fmt(hi)}, not 1",
                    f"加 padding mask 后真实 query 的权重之和为 {fmt(lo)}..{fmt(hi)}，而不是 1",
                    {"row_sum_min": lo, "row_sum_max": hi},
                )
            )
    return findings + [_form_leak(c, state) for c in state.form_leaks], None


def _on_queries(state: ProbeState, out: torch.Tensor, real: torch.Tensor, no_effect: bool) -> str | None:
    """``padding_mask_on_queries`` when the mask leaves every real query's output as it was and moves only the
    padded rows: it hides padded queries (rows), not padded keys (columns)."""
    if no_effect or _leak(max_diff(out, state.base, real), state) or not _leak(max_diff(out, state.base, ~real), state):
        return None
    return "padding_mask_on_queries"


def _form_leak(cand: MaskCandidate, state: ProbeState) -> Finding:
    """One accepted mask form that leaks beside the right one the probes use: an error naming the form. When that
    form leaves every real query's output as it was and moves only the padded rows, it masks the queries."""
    sense_en, sense_zh = SENSE_SHORT[cand.fmt.sense]
    layout, best = cand.fmt.layout, state.mask.layout if state.mask is not None else "?"
    on_queries = not _leak(cand.real_effect, state)
    what = (
        "it leaves every real query's output as it was and changes only the padded rows: it masks the queries "
        "(rows), not the keys (columns)"
        if on_queries
        else "the padded keys still reach the real queries"
    )
    what_zh = (
        "真实 query 的输出完全不变，只有 padding 行变了：它遮住的是 query（行）而不是 key（列）"
        if on_queries
        else ("padding key 仍然影响真实 query")
    )
    return Finding(
        "padding_leak",
        "error",
        f"the module also accepts a {layout} mask ({sense_en}), and that form leaks: changing the padded tokens "
        f"moved the real outputs by {fmt(cand.leak)} ({what}); the same mask as {best} hides the padding, so the "
        f"{layout} path handles the mask differently",
        f"模块也接受 {layout} 形状的 mask（{sense_zh}），而这种形式会泄漏：改变 padding token 使真实输出变化了 "
        f"{fmt(cand.leak)}（{what_zh}）；同样的 mask 写成 {best} 时能遮住 padding，"
        f"所以 {layout} 这条分支处理 mask 的方式不同",
        {"form": {"sense": cand.fmt.sense, "layout": layout}, "leak": cand.leak, "masks_queries": on_queries},
        fault="padding_mask_on_queries" if on_queries else None,
    )


def _no_mask(state: ProbeState) -> Skip:
    if not state.subject.takes_mask:
        return ("forward takes no mask", "forward 不接受 mask")
    return ("no mask format was accepted", "没有任何 mask 格式被接受")


def fully_masked(state: ProbeState) -> ProbeResult:
    if state.mask is None:
        return [], _no_mask(state)
    keep = pad_keep(state.b, state.t, [state.t, 0])  # sequence 1 is all padding: its queries see no key
    try:
        out, w = state.subject.run(state.x, state.mask.make(keep, state.x.dtype))
    except CallError as err:
        return [], (f"forward raised on an all-padding sequence: {err}", f"全是 padding 的序列让 forward 报错：{err}")
    nan_empty = int(torch.isnan(out[1]).sum())
    nan_real = int(torch.isnan(out[0]).sum())
    findings = []
    if nan_real:
        findings.append(
            Finding(
                "fully_masked",
                "error",
                f"NaN from the all-padding sequence reached the other sequence ({nan_real} outputs)",
                f"全 padding 序列产生的 NaN 扩散到了另一个序列（{nan_real} 个输出）",
                {"nan_outputs_real_sequence": nan_real},
            )
        )
    if nan_empty:
        torch_nn = any(isinstance(m, nn.MultiheadAttention) for m in state.subject.module.modules())
        note_en = " (a known behaviour of torch.nn.MultiheadAttention)" if torch_nn else ""
        note_zh = "（torch.nn.MultiheadAttention 的已知行为）" if torch_nn else ""
        findings.append(
            Finding(
                "fully_masked",
                "warning",
                f"a sequence whose keys are all padding gives NaN in {nan_empty} of {out[1].numel()} outputs{note_en}; "
                "guard rows with no visible key (weights 0) so the NaN cannot reach the loss",
                f"key 全是 padding 的序列有 {nan_empty}/{out[1].numel()} 个输出为 NaN{note_zh}；请对没有可见 key 的行"
                "做保护（权重置 0），以免 NaN 传到 loss",
                {"nan_outputs": nan_empty, "of": out[1].numel()},
                fault="inf_fill_no_guard",
            )
        )
    return findings, None


def float16_fill(state: ProbeState) -> ProbeResult:
    if state.mask is None:
        return [], _no_mask(state)
    try:
        half = copy.deepcopy(state.subject.module).half()
    except Exception as err:  # noqa: BLE001
        return [], (f"could not copy the module to float16: {err}", f"无法把模块复制为 float16：{err}")
    keep = pad_keep(state.b, state.t, [state.t, state.t - 2])
    try:
        state.subject.run(state.x.half(), state.mask.make(keep, torch.float16), module=half)
    except CallError as err:
        if "overflow" in str(err):
            return [
                Finding(
                    "float16_fill",
                    "warning",
                    f"in float16 the mask fill does not fit ({err}); use float('-inf') with a guard or "
                    "torch.finfo(scores.dtype).min",
                    f"float16 下 mask 的填充值放不下（{err}）；请用 float('-inf') 并处理整行被遮的情况，或用 "
                    "torch.finfo(scores.dtype).min",
                    {"error": str(err)},
                    fault="finite_mask_fill",
                )
            ], None
        return [], (f"the module does not run in float16 here: {err}", f"模块在这里无法以 float16 运行：{err}")
    return [], None
