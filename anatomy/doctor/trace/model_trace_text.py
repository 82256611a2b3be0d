"""The model trace as a terminal table or GitHub markdown, in English or Chinese (``model_trace.py``): one header
line per group (embedding, blocks "× L", after the blocks, loss), the learner trace's columns, and the loss's
pairing under the table."""

from __future__ import annotations

import os
from typing import Any

from anatomy.doctor.trace.learner_trace_text import MARK, _short, _t, kind_text, legend_line
from anatomy.doctor.trace.model_groups import span
from anatomy.doctor.trace.model_loss import meaning

LABELS = {  # the model-level steps (model_parts.label_outside)
    "tok": ("token embedding", "词元嵌入"),
    "pos": ("positions (made from positions alone)", "位置信息（只由位置算出）"),
    "pos_in": ("positions enter here", "位置信息在这里加入"),
    "scale": ("scale", "缩放"),
    "final_norm": ("final norm", "最后的归一化"),
    "head": ("head → logits", "输出头 → logits"),
    "tied_head": ("head → logits (tied: the token embedding's weight)", "输出头 → logits（与词元嵌入共享权重）"),
    "loss": ("loss", "损失"),
    "shift": ("shift (slice for the loss)", "错位（为损失切片）"),
    "flat": ("flatten for the loss", "为损失展平"),
}


def step_text(row: Any, lang: str) -> str:
    """The step column of a row (a ``Row``/``ModelRow`` or its dict): the model-level label, else the post's step."""

    def get(key: str) -> str:
        return str((row.get(key) if isinstance(row, dict) else getattr(row, key, "")) or "")

    if get("label") in LABELS:
        en, zh = LABELS[get("label")]
        return _t(lang, en, zh) + (f" {get('detail')}" if get("detail") else "")
    return kind_text(get("kind"), get("role"), lang)


def group_title(group: Any, lang: str, stack: bool = True) -> str:
    if group.part == "block":
        layers = span(group.layers)
        kind = f" ({group.block_type})" if group.block_type else ""
        many = len(group.layers) > 1
        en = f"blocks {layers}{kind} × {len(group.layers)}: alike" if many else f"block {layers}{kind}"
        zh = f"第 {layers} 层{kind} × {len(group.layers)}：完全相同" if many else f"第 {layers} 层{kind}"
        return _t(lang, en, zh)
    if group.part == "embed" and not stack:
        return _t(lang, "before the head (no stack of blocks found)", "输出头之前（没有找到块的堆叠）")
    if group.part == "final" and not stack:
        return _t(lang, "the head", "输出头")
    en, zh = {
        "embed": ("embedding", "嵌入"),
        "final": ("after the blocks", "所有块之后"),
        "loss": ("loss", "损失"),
    }[group.part]
    return _t(lang, en, zh)


def _shape(row: Any) -> str:
    return f"{row.dims} = ({', '.join(str(n) for n in row.shape)})"


def _cells(row: Any, lang: str) -> list[str]:
    return [
        str(row.line),
        _short(row.source),
        row.op + (" × H" if getattr(row, "repeat", 1) > 1 else ""),
        step_text(row, lang),
        _shape(row),
        MARK if row.deviation == "first" else ("<" if row.deviation else ""),
    ]


def loss_line(trace: Any, lang: str) -> list[str]:
    loss = trace.loss
    out = []
    if loss.read and loss.logits:
        out.append(
            _t(
                lang,
                f"loss: {loss.logits} {loss.logits_dims} vs {loss.targets} {loss.targets_dims}",
                f"损失：{loss.logits} {loss.logits_dims} 对 {loss.targets} {loss.targets_dims}",
            )
        )
    elif loss.read and loss.pairs:
        out.append(
            _t(lang, f"loss pairs (logits → target): {loss.pairs}", f"损失的配对（logits → 目标）：{loss.pairs}")
        )
    if loss.found:
        en, zh = meaning(loss)
        out.append(_t(lang, f"      {en}", f"      {zh}"))
    return out


def render(trace: Any, fmt: str, lang: str) -> str:
    """``trace``: a ``model_trace.ModelTrace`` (its own ``render`` calls this)."""
    sizes = ", ".join(f"{k}={v}" for k, v in trace.sizes.items() if k != "T-1")
    layers = sum(len(g.layers) for g in trace.groups if g.part == "block")
    sizes += f", L={layers}" if layers else ""
    title = f"anatomy trace · {trace.target} · {trace.call} · {sizes}"
    header = [
        _t(lang, "line", "行"),
        _t(lang, "your code", "你的代码"),
        "op",
        _t(lang, "step", "步骤"),
        _t(lang, "shape", "形状"),
        "",
    ]
    stack = any(g.part == "block" for g in trace.groups)
    parts = [(group_title(g, lang, stack), g, [_cells(x, lang) for x in g.rows]) for g in trace.groups]
    body = [c for _t_, _g, cells in parts for c in cells]
    out: list[str] = []
    if fmt == "markdown":
        out += [f"**{title}**", "", "| " + " | ".join(h or " " for h in header) + " |", "|" + "---|" * len(header)]
        for name, g, cells in parts:
            out.append(f"| **{name}** |" + " |" * (len(header) - 1))
            if g.differs[0]:
                out.append(f"| | *{_t(lang, g.differs[0], g.differs[1])}* |" + " |" * (len(header) - 2))
            out += ["| " + " | ".join(c.replace("|", "\\|") or " " for c in row) + " |" for row in cells]
    else:
        widths = [max(len(h), *(len(row[i]) for row in body)) if body else len(h) for i, h in enumerate(header)]
        line = "  ".join(h.ljust(w) for h, w in zip(header, widths)).rstrip()
        out += [title, line, "-" * len(line)]
        for name, g, cells in parts:
            out.append(f"── {name} ──")
            if g.differs[0]:
                out.append("   " + _t(lang, g.differs[0], g.differs[1]))
            if not cells:
                out.append("   " + _t(lang, "(no step recorded)", "（没有记录到步骤）"))
            out += ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells]
    out.append("")
    out += loss_line(trace, lang)
    dev = trace.deviation
    if dev is not None:
        where = f"{os.path.basename(dev.get('file', ''))}:{dev.get('line')}"
        out.append(
            _t(
                lang,
                f"{MARK} first step that leaves the post's flow: layer {dev.get('layer')}, line {dev.get('line')} "
                f"({where}) `{dev.get('source', '')}`",
                f"{MARK} 第一个偏离博文流程的步骤：第 {dev.get('layer')} 层，第 {dev.get('line')} 行（{where}）"
                f"`{dev.get('source', '')}`",
            )
        )
        out.append(_t(lang, f"   seen: {dev['seen']}", f"   看到的：{dev['seen_zh']}"))
        if dev.get("expected"):
            out.append(_t(lang, f"   the post expects: {dev['expected']}", f"   博文的做法：{dev['expected_zh']}"))
    for en, zh in trace.notes:
        out.append(_t(lang, f"note: {en}", f"注意：{zh}"))
    if fmt != "markdown":
        out.append(legend_line(lang) + _t(lang, ", L layers", "，L 层数"))
    return "\n".join(out)
