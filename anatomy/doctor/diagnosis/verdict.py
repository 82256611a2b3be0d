"""The diagnosis as findings: one per fault it names (a pair gives two, with the same numbers), the sub-layer it
sits in, what a named fault leaves unexplained beside it, or where an unexplained difference first appears; and
which named fault explains each probe's symptom (the records' ``symptoms``)."""

from __future__ import annotations

from typing import Any

from anatomy.doctor.diagnosis import diagnose as dg
from anatomy.doctor.diagnosis import pairs
from anatomy.doctor.diagnosis.sublayer import severity
from anatomy.doctor.diagnosis.verdicts import Diagnosis
from anatomy.doctor.report.findings import Finding
from anatomy.doctor.report.words import fmt
from anatomy.pitfalls import records

SUB_LAYER_TEXT = {
    "attn": (" (in the attention sub-layer only)", "的注意力子层"),
    "ffn": (" (in the FFN sub-layer only)", "的 FFN 子层"),
}
RUN_TEXT = {
    "plain": ("the plain run", "不加 mask 的运行"),
    "padding": ("the padding-mask run", "加 padding mask 的运行"),
    "causal_mask": ("the causal-mask run", "加因果 mask 的运行"),
}


def cause(probe: str, faults: list[str]) -> str:
    """The fault that explains a symptom: the one fault named; of a pair, the one known to cause it (the more
    specific when both can: a causal leak is the off-by-one mask's rather than the mixed heads'), else the first."""
    causes = [f for f in faults if probe in records.symptoms(f)]
    return min(causes, key=lambda f: len(records.symptoms(f))) if causes else faults[0]


def diagnosis_findings(diag: Diagnosis) -> list[Finding]:
    if diag.status == "matches" and diag.variant.get("residual"):  # right, and a design to say beside it
        return [_residual_inside(diag)]
    if diag.status == "fault" and diag.fault == dg.RANDOM:
        return [_random_finding(diag)]
    if diag.status in ("fault", "ambiguous") and len(diag.faults) == 2:  # one finding per fault, same numbers
        a, b = diag.faults
        untried_en, untried_zh = pairs.untried_note(diag.pairs)
        also_en = "".join(f"; also reproduced by {x} + {y}" for x, y in diag.also_pairs) + untried_en
        also_zh = "".join(f"；{x} + {y} 也能复现" for x, y in diag.also_pairs) + untried_zh
        ev: dict[str, object]  # JSON evidence
        ev = {
            "max_abs_diff_vs_reference": diag.distance_correct,
            "max_abs_diff_vs_faulty_reference": diag.distance_fault,
            "output_scale": diag.scale,
            "faults": [a, b],
            **({"variant": diag.variant} if diag.variant else {}),
        }
        en = (
            f"max |you − reference| = {fmt(diag.distance_correct)}; no single fault of the bug zoo reproduces your "
            f"output, but {a} and {b} switched on together in the reference do: {fmt(diag.distance_fault)}"
            f"{also_en}"
        )
        zh = (
            f"最大 |你 − 参考| = {fmt(diag.distance_correct)}；bug zoo 中没有单个错误能复现你的输出，但在参考实现里"
            f"同时打开 {a} 和 {b} 后为 {fmt(diag.distance_fault)}{also_zh}"
        )
        return [Finding("diagnosis", severity(f), en, zh, dict(ev), fault=f) for f in (a, b)]
    if diag.status in ("fault", "ambiguous"):
        f = diag.fault
        assert f is not None  # a "fault" or "ambiguous" diagnosis always names its fault
        also_en = f" (also reproduced by: {', '.join(diag.also)})" if diag.also else ""
        also_zh = f"（{', '.join(diag.also)} 也能复现）" if diag.also else ""
        ev = {
            "max_abs_diff_vs_reference": diag.distance_correct,
            "max_abs_diff_vs_faulty_reference": diag.distance_fault,
            "output_scale": diag.scale,
            **({"variant": diag.variant} if diag.variant else {}),
        }
        if diag.unexplained and diag.unexplained.get("after"):
            return _before_output_findings(diag, f, ev, also_en, also_zh)
        where_en, where_zh = SUB_LAYER_TEXT.get(diag.sub_layer or "", ("", ""))
        out = [
            Finding(
                "diagnosis",
                severity(f),
                f"max |you − reference| = {fmt(diag.distance_correct)}; with {f} switched on in the reference"
                f"{where_en}: {fmt(diag.distance_fault)}{also_en}",
                f"最大 |你 − 参考| = {fmt(diag.distance_correct)}；在参考实现{where_zh}里打开 {f} 后为 "
                f"{fmt(diag.distance_fault)}{also_zh}",
                ev,
                fault=f,
            )
        ]
        if diag.sub_layer:
            ev["sub_layer"] = diag.sub_layer
        if diag.unexplained:  # the known pitfall, and what it leaves different beside it
            left = diag.unexplained
            runs = ", ".join(RUN_TEXT.get(k, (k, k))[0] for k in left["scenarios"])
            runs_zh = "、".join(RUN_TEXT.get(k, (k, k))[1] for k in left["scenarios"])
            ok = ", ".join(RUN_TEXT.get(k, (k, k))[0] for k in left["matched"])
            ok_zh = "、".join(RUN_TEXT.get(k, (k, k))[1] for k in left["matched"])
            out.append(
                Finding(
                    "diagnosis",
                    "warning",
                    f"{f} reproduces your output on {ok}, but not on {runs} (max |Δ| {fmt(left['max_abs_diff'])}): "
                    "something else differs there too, beside the pitfall named",
                    f"{f} 在{ok_zh}上与你的输出一致，但在{runs_zh}上仍不同（最大 |Δ| {fmt(left['max_abs_diff'])}）："
                    "除了已指出的错误，那里还有别的不同",
                    {"unexplained": left},
                )
            )
        return out
    if diag.status == "unexplained":
        fd = diag.first_difference or {}
        near = diag.nearest[0] if diag.nearest else {}
        where, where_zh = fd.get("where", "?"), fd.get("where_zh", "?")
        nearest = " + ".join(near.get("faults") or []) or "correct"
        nearest_zh = " + ".join(near.get("faults") or []) or "正确实现"
        before = ", ".join(fd.get("matching_before") or []) or "-"
        tried_en, tried_zh = pairs.which_pairs(diag.pairs)
        return [
            Finding(
                "diagnosis",
                "warning",
                f"your output differs from the reference by {fmt(diag.distance_correct)} and neither a single fault "
                f"of the bug zoo nor {tried_en} reproduces it (nearest: {nearest} at {fmt(near.get('max_abs_diff'))}); "
                f"first difference: {where} (max |Δ| {fmt(fd.get('max_abs_diff'))}); matching before it: {before}",
                f"你的输出与参考相差 {fmt(diag.distance_correct)}，bug zoo 中没有单个错误、也没有{tried_zh}能复现"
                f"（最接近：{nearest_zh}，差 {fmt(near.get('max_abs_diff'))}）；最早的差异：{where_zh}"
                f"（最大 |Δ| {fmt(fd.get('max_abs_diff'))}）；在它之前一致的：{before}",
                {"max_abs_diff_vs_reference": diag.distance_correct, "first_difference": fd, "nearest": diag.nearest},
            )
        ]
    return []


def _residual_inside(diag: Diagnosis) -> Finding:
    return Finding(
        "diagnosis",
        "warning",
        "your module returns its input plus the attention (x + attention(x)), which equals the reference "
        f"(max |Δ| {fmt(diag.distance_correct)}): a diffusion U-Net's AttentionBlock is called this way, but inside a "
        "transformer block that adds x again the residual is counted twice",
        "你的模块返回输入加注意力（x + attention(x)），与参考一致（最大 |Δ| "
        f"{fmt(diag.distance_correct)}）：扩散 U-Net 的 AttentionBlock 就是这样调用的，但如果外面的 Transformer 块"
        "还会再加一次 x，残差就被加了两次",
        {"max_abs_diff_vs_reference": diag.distance_correct, "variant": diag.variant},
    )


def _before_output_findings(
    diag: Diagnosis, f: str, ev: dict[str, object], also_en: str, also_zh: str
) -> list[Finding]:
    """A fault reproduced at the input of the output projection (``before_output``), and what differs after it."""
    left = diag.unexplained or {}
    proj = left["after"]
    return [
        Finding(
            "diagnosis",
            severity(f),
            f"the input of your output projection ({proj}) differs from the reference's by "
            f"{fmt(diag.distance_correct)}; with {f} switched on in the reference it is reproduced there "
            f"({fmt(diag.distance_fault)}){also_en}",
            f"你的输出投影（{proj}）的输入与参考相差 {fmt(diag.distance_correct)}；在参考实现里打开 {f} 后，"
            f"那里完全吻合（{fmt(diag.distance_fault)}）{also_zh}",
            {**ev, "compared_at": f"input of {proj}"},
            fault=f,
        ),
        Finding(
            "diagnosis",
            "warning",
            f"after {proj} your output still differs from the reference with {f} (max |Δ| "
            f"{fmt(left.get('max_abs_diff'))}): the module does more than the attention there (a residual added "
            "inside, say), which the doctor does not compare",
            f"在 {proj} 之后，你的输出与打开 {f} 的参考仍不同（最大 |Δ| {fmt(left.get('max_abs_diff'))}）：模块在那里"
            "做了注意力之外的事（例如在内部加了残差），医生不比较这一部分",
            {"unexplained": left},
        ),
    ]


def _random_finding(diag: Diagnosis) -> Finding:
    d = fmt(diag.distance_correct)
    return Finding(
        "diagnosis",
        severity(dg.RANDOM),
        f"two identical calls in eval mode give outputs {d} apart: something random is still on at evaluation, so "
        "no reference can be compared with it",
        f"eval 模式下两次相同的调用输出相差 {d}：评估时仍有随机的操作开着，无法与任何参考实现比较",
        {"max_abs_diff_between_calls": diag.distance_correct, "output_scale": diag.scale},
        fault=dg.RANDOM,
    )


SYMPTOM_PROBES = {"token_order", "padding_leak", "causal_leak", "batch_independence"}


def flow_finding(fault: str, dev: dict[str, Any]) -> Finding:
    """A fault the recorded flow shows (``dataflow.deviation_faults``), named beside an output the comparison
    could not reproduce (a valid variation next to it, say)."""
    where = f"line {dev['line']} `{dev['source']}`" if dev.get("line") else "one step"
    where_zh = f"第 {dev['line']} 行 `{dev['source']}`" if dev.get("line") else "某一步"
    return Finding(
        "dataflow",
        severity(fault),
        f"the recorded forward shows {fault} at {where}: {dev['seen']}; the post expects: {dev['expected']}",
        f"记录的 forward 在{where_zh}显示了 {fault}：{dev.get('seen_zh', dev['seen'])}；原文的做法："
        f"{dev.get('expected_zh', dev['expected'])}",
        {"line": dev.get("line"), "source": dev.get("source"), "dims": dev.get("dims"), "kind": dev.get("kind")},
        fault=fault,
    )
