"""The short answer a learner reads first (``anatomy check`` without ``--details``): the verdict, the pitfall, the
line, the post's own sentence and one hint, in at most 8 lines, English or Chinese. No internal names: a pitfall is
called by its title (the bug-zoo name appears only in ``--details`` and the JSON), and nothing says "pass --flag".

    ✗ NOT YET: scores scaled by sqrt(d_model) instead of sqrt(d_k)
      where: line 23 of my_attention.py: scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_model)
      the post: 缩放因子必须是 sqrt(d_k) 而不是 sqrt(d_model)...
      hint: the scale divides by the width of one head, d_k = d_model / n_heads.
      also: ...; the full report: add --details
"""

from __future__ import annotations

import os

from anatomy.doctor.report.findings import PROBE_TITLES, Finding, Report, wrap
from anatomy.pitfalls import records

MAX_LINES = 8


def _t(lang: str, en: str, zh: str) -> str:
    return zh if lang == "zh" else en


def _first_sentence(text: str) -> str:
    for stop in ("。", ": ", "；", ". "):
        at = text.find(stop)
        if 0 < at < len(text) - 1:
            return text[: at + 1].rstrip(" :")
    return text


def _title(fault: str | None, f: Finding, lang: str) -> str:
    i = 1 if lang == "zh" else 0
    z = records.get(fault)
    if z is not None:
        return z.title(lang)
    return PROBE_TITLES.get(f.probe, (f.probe, f.probe))[i]


def _where(fs: list[Finding], lang: str) -> str | None:
    """The first line a group's findings point at: the named fault's own finding first, then its symptoms."""
    fs = sorted(fs, key=lambda f: f.fault is None)
    for f in fs:
        for w in f.where:
            if w.get("line"):
                name = os.path.basename(w.get("file") or "") or "?"
                src = w.get("source") or ""
                en, zh = f"line {w['line']} of {name}", f"{name} 第 {w['line']} 行"
                if w.get("cell") is not None:  # a notebook cell, named by anatomy/notebook/cells.py
                    en, zh = w["where"], w.get("where_zh", w["where"])
                return _t(lang, f"where: {en}", f"位置：{zh}") + (_t(lang, ": ", "：") + src if src else "")
    return None


def _unchecked(report: Report, lang: str) -> str:
    """A model's blocks the block doctor could not run alone: what the PASS does not cover, said first."""
    d = report.diagnosis
    n, checked = d.get("layers"), d.get("checked")
    if report.kind != "lm" or not isinstance(n, int) or not isinstance(checked, int) or checked >= n:
        return ""
    why = d.get("reason") or ""
    if checked == 0:
        return _t(
            lang,
            f" in the model as a whole; its {n} blocks could not be run alone ({why}), so the doctor can't tell "
            "whether they hold one",
            f"（只检查了整个模型；它的 {n} 个 block 无法单独运行（{why}），医生无法判断 block 里是否有坑）",
        )
    return _t(
        lang,
        f" ({n - checked} of {n} blocks could not be run alone ({why}): the doctor can't tell about those)",
        f"（{n} 个 block 中有 {n - checked} 个无法单独运行（{why}）：医生无法判断它们）",
    )


def short_answer(report: Report, lang: str = "en", width: int = 80, strict: bool = False) -> list[str]:
    """At most :data:`MAX_LINES` logical lines (each wrapped to ``width``): the verdict first."""
    groups = report.groups()
    bad = [(k, fs) for k, fs in groups if any(f.severity == "error" for f in fs)]
    warn = [(k, fs) for k, fs in groups if not any(f.severity == "error" for f in fs)]
    lines: list[str] = []
    if bad:
        fault, fs = bad[0]
        lines.append(_t(lang, "✗ NOT YET: ", "✗ 还不对：") + _title(fault, fs[0], lang))
        where = _where(fs, lang)
        if where:
            lines.append("  " + where)
        z = records.get(fault)
        if z is not None:
            if z.post_zh:
                lines.append(_t(lang, "  the post: ", "  原文：") + z.post_zh)
            hint = z.summary_zh if lang == "zh" else z.summary_en
            lines.append(_t(lang, "  hint: ", "  提示：") + _first_sentence(hint))
        else:
            lines.append(_t(lang, "  what differs: ", "  哪里不同：") + _first_sentence(fs[0].text(lang)))
        more = [_title(k, f[0], lang) for k, f in bad[1:]]
        if more:
            lines.append(_t(lang, "  also: ", "  另外：") + _t(lang, "; ", "；").join(more))
    else:
        status = report.diagnosis.get("status")
        lines.append(
            _t(lang, "✓ PASS: none of the post's pitfalls found", "✓ 通过：没有发现原文列出的坑")
            + _unchecked(report, lang)
            + (
                _t(lang, " (your output equals the reference's)", "（输出与参考实现一致）")
                if status == "matches"
                else _t(
                    lang,
                    " (but your output differs from the reference's and no known pitfall reproduces it: the doctor "
                    "can't tell whether that is a design or a bug; see the diagnosis warning)",
                    "（但你的输出与参考实现不同，且没有已知的坑能复现：医生无法判断这是设计还是错误；见诊断警告）",
                )
                if status == "unexplained"
                else ""
                if status == "unchecked"
                else _t(
                    lang,
                    " (not compared with the reference: the doctor could not map your weights)",
                    "（未与参考实现比较：医生没能对应上你的权重）",
                )
            )
        )
    budget = MAX_LINES - len(lines) - 1
    for k, fs in warn[: max(0, budget)]:
        lines.append(
            _t(lang, "  ! warning: ", "  ! 警告：")
            + _title(k, fs[0], lang)
            + (
                _t(lang, " (", "（")
                + (_where(fs, lang) or "").removeprefix(_t(lang, "where: ", "位置："))
                + _t(lang, ")", "）")
                if _where(fs, lang)
                else ""
            )
        )
    code = report.exit_code(strict)
    errors, warnings = report.counts()
    lines.append(
        _t(
            lang,
            f"  {errors} error{'s' * (errors != 1)}, {warnings} warning{'s' * (warnings != 1)} → exit "
            f"{code}; the full report, with every check and its numbers: add --details",
            f"  {errors} 个错误，{warnings} 个警告 → 退出码 {code}；完整报告（每项检查和数值）：加 --details",
        )
    )
    out: list[str] = []
    for i, line in enumerate(lines[:MAX_LINES]):
        out += wrap(line.strip(), width, first="" if i == 0 else "  ", rest="    ")
    return out
