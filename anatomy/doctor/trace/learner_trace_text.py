"""The learner trace as a terminal table or GitHub markdown, in English or Chinese (``learner_trace.py``)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from anatomy.doctor.trace.learner_labels import Row
from anatomy.inspection.trace import KINDS
from anatomy.shapes import LEGEND

if TYPE_CHECKING:
    from anatomy.doctor.trace.learner_trace import LearnerTrace

MARK = "<<"
SOURCE_WIDTH = 48


def _t(lang: str, en: str, zh: str) -> str:
    return zh if lang == "zh" else en


def _short(text: str, width: int = SOURCE_WIDTH) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _shape(row: Row) -> str:
    return f"{row.dims} = ({', '.join(str(n) for n in row.shape)})"


def render(trace: LearnerTrace, fmt: str, lang: str) -> str:
    """The table of ``trace`` (its own ``render`` calls this)."""
    sizes = ", ".join(f"{k}={v}" for k, v in trace.sizes.items())
    title = _t(
        lang,
        f"anatomy trace · {trace.target} · {trace.call} · {sizes}",
        f"anatomy trace · {trace.target} · {trace.call} · {sizes}",
    )
    header = [
        _t(lang, "line", "行"),
        _t(lang, "your code", "你的代码"),
        "op",
        _t(lang, "post's step", "博文步骤"),
        _t(lang, "shape", "形状"),
        "",
    ]
    body = [
        [
            str(row.line),
            _short(row.source),
            row.op + (" × H" if getattr(row, "repeat", 1) > 1 else ""),
            kind_text(row.kind, row.role, lang),
            _shape(row),
            MARK if row.deviation == "first" else ("<" if row.deviation else ""),
        ]
        for row in trace.rows
    ]
    if fmt == "markdown":
        out = [f"**{title}**", "", "| " + " | ".join(h or " " for h in header) + " |", "|" + "---|" * len(header)]
        out += ["| " + " | ".join(c.replace("|", "\\|") or " " for c in row) + " |" for row in body]
    else:
        widths = [max(len(h), *(len(row[i]) for row in body)) for i, h in enumerate(header)]
        line = "  ".join(h.ljust(w) for h, w in zip(header, widths)).rstrip()
        out = [title, line, "-" * len(line)]
        out += ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in body]
    out.append("")
    dev = trace.deviation
    if dev is None:
        out.append(
            _t(
                lang,
                "every step follows the post's flow (§5.1): no step leaves it",
                "每一步都符合博文的流程（§5.1）：没有偏离的步骤",
            )
        )
    else:
        where = f"{os.path.basename(dev['file'])}:{dev['line']}"
        out.append(
            _t(
                lang,
                f"{MARK} first step that leaves the post's flow: line {dev['line']} ({where}) `{dev['source']}`",
                f"{MARK} 第一个偏离博文流程的步骤：第 {dev['line']} 行（{where}）`{dev['source']}`",
            )
        )
        out.append(_t(lang, f"   seen: {dev['seen']}", f"   看到的：{dev['seen_zh']}"))
        out.append(_t(lang, f"   the post expects: {dev['expected']}", f"   博文的做法：{dev['expected_zh']}"))
        for more in trace.deviations[1:]:
            out.append(
                _t(
                    lang,
                    f"<  also line {more['line']}: {more['seen']}",
                    f"<  另外第 {more['line']} 行：{more['seen_zh']}",
                )
            )
    for en, zh in trace.notes:
        out.append(_t(lang, f"note: {en}", f"注意：{zh}"))
    if fmt != "markdown":
        out.append(legend_line(lang))
    return "\n".join(out)


EXTRA_KINDS = {  # kinds the post's table does not have a row for
    "scale": ("scale the scores", "缩放分数"),
    "mask": ("mask the scores", "对分数加 mask"),
    "act": ("activation", "激活函数"),
    "fused": ("fused attention (one call)", "融合的注意力（一次调用）"),
    "cast": ("cast to another dtype (values unchanged)", "转换数据类型（数值不变）"),
}


def kind_text(kind: str, role: str, lang: str) -> str:
    if not kind:
        return ""
    if kind in KINDS:
        en, zh, _ = KINDS[kind]
        if kind == "proj" and role:
            en, zh = f"linear projection {role.upper()}", f"线性投影 {role.upper()}"
    else:
        en, zh = EXTRA_KINDS[kind]
    return zh if lang == "zh" else en


LEGEND_ZH = {
    "B": "批大小",
    "T": "查询（目标）长度",
    "S": "键/值（源）长度",
    "D": "模型宽度 d_model",
    "H": "查询头数",
    "Hkv": "键/值头数",
    "Dh": "每个头的宽度",
    "F": "前馈网络隐藏层宽度 d_ff",
    "V": "词表大小",
}


def legend_line(lang: str) -> str:
    if lang == "zh":
        return "图例：" + "，".join(f"{k} {v}" for k, v in LEGEND_ZH.items())
    return "legend: " + ", ".join(f"{k} {v}" for k, v in LEGEND.items())
