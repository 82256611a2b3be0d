"""HTML for Jupyter: the doctor's report, the trace tables, a course result, claim verdicts.

Every function takes the object and returns a self-contained HTML fragment (inline styles, no script, escaped
text), so a notebook saved with its outputs shows the same thing on GitHub or nbviewer. The objects' own
``_repr_html_`` methods call these, importing this module only when Jupyter asks; a terminal never does and prints
the command line's text. Each fragment ends with that full text in a folded ``<details>``, so nothing the command
line says is lost.
"""

from __future__ import annotations

import html
from typing import Any

GREEN, RED, AMBER, GREY = "#1a7f37", "#cf222e", "#9a6700", "#57606a"
BOX = (
    "font-family: system-ui, 'Noto Sans CJK SC', 'WenQuanYi Micro Hei', sans-serif; font-size: 13px; line-height: 1.45"
)
CELL = "padding: 2px 8px; border-bottom: 1px solid #d0d7de; text-align: left; vertical-align: top"
CODE = "font-family: ui-monospace, 'DejaVu Sans Mono', monospace; font-size: 12px"


def esc(x: Any) -> str:
    return html.escape("" if x is None else str(x))


def badge(verdict: str, text: str | None = None) -> str:
    colour = {
        "pass": GREEN,
        "done": GREEN,
        "supported": GREEN,
        "fail": RED,
        "refuted": RED,
        "error": RED,
        "warning": AMBER,
        "nuanced": AMBER,
        "tried": AMBER,
    }.get(verdict, GREY)
    return (
        f'<span style="background:{colour};color:white;border-radius:4px;padding:1px 7px;font-weight:600">'
        f"{esc(text or verdict)}</span>"
    )


def table(header: list[str], rows: list[list[str]], marked: set[int] | None = None) -> str:
    """Rows are HTML already (escape what goes in); rows whose index is in ``marked`` are highlighted."""
    head = "".join(f'<th style="{CELL}">{h}</th>' for h in header)
    body = []
    for i, row in enumerate(rows):
        style = ' style="background:#ffebe9"' if marked and i in marked else ""
        body.append(f"<tr{style}>" + "".join(f'<td style="{CELL}">{c}</td>' for c in row) + "</tr>")
    return f'<table style="border-collapse:collapse;margin:4px 0">{"<tr>" + head + "</tr>"}{"".join(body)}</table>'


def folded(text: str, summary: str = "full text") -> str:
    return (
        f'<details><summary style="color:{GREY};cursor:pointer">{esc(summary)}</summary>'
        f'<pre style="{CODE};white-space:pre-wrap">{esc(text)}</pre></details>'
    )


def code(text: Any) -> str:
    return f'<code style="{CODE}">{esc(text)}</code>'


def _lines_table(lines: list[dict[str, Any]], lang: str) -> str:
    if not lines:
        return ""
    rows = [[esc(w.get("where")), code(w.get("source")), esc(w.get("zh" if lang == "zh" else "en"))] for w in lines]
    header = ["哪里", "你的代码", "说明"] if lang == "zh" else ["where", "your code", "what"]
    return table(header, rows)


def check_html(result: Any) -> str:
    """``anatomy.check``'s result: the verdict, the pitfalls with their lines, then the full report folded."""
    lang = getattr(result, "lang", "en")
    zh = lang == "zh"
    title = f"anatomy check · {esc(result.target)}"
    if result.report is None:
        return (
            f'<div style="{BOX}"><b>{title}</b> {badge("error")}<p style="color:{RED}">{esc(result.text())}</p></div>'
        )
    errors, warnings = result.report.counts()
    head = f"<b>{title}</b> {badge(result.verdict)} " + esc(
        f"{errors} 个错误，{warnings} 个警告"
        if zh
        else f"{errors} error{'s' * (errors != 1)}, {warnings} warning{'s' * (warnings != 1)}"
    )
    parts = [f'<div style="{BOX}">{head}']
    if result.pitfalls:
        from anatomy.pitfalls import records

        items = "".join(f"<li>{code(p)}: {esc(records.title(p, lang))}</li>" for p in result.pitfalls)
        parts.append(f'<p style="margin:4px 0">{"坑" if zh else "pitfalls"}:</p><ul style="margin:2px 0">{items}</ul>')
    parts.append(_lines_table(result.lines, lang))
    if result.isolation == "none":
        parts.append(
            f'<p style="color:{GREY}">'
            + esc(
                "在本进程中检查（这里没有 fork）：只有进程内的时限"
                if zh
                else "checked in this process (no fork here): in-process time limits only"
            )
            + "</p>"
        )
    parts.append(
        folded(
            result.text(details=True), "完整报告" if zh else "the full report (as `anatomy check --details` prints it)"
        )
    )
    return "".join(parts) + "</div>"


def _trace_rows(rows: list[dict[str, Any]], lang: str) -> tuple[list[list[str]], set[int]]:
    from anatomy.doctor.trace.learner_trace_text import kind_text

    out, marked = [], set()
    from anatomy.doctor.trace.model_trace_text import step_text  # a whole model's rows: its own steps (label)

    for i, r in enumerate(rows):
        if r.get("deviation"):
            marked.add(i)
        shape = f"{r['dims']} = ({', '.join(str(n) for n in r['shape'])})"
        out.append(
            [
                esc(r.get("where") or r.get("line")),
                code(r.get("source")),
                code(r.get("op")),
                esc(step_text(r, lang) if r.get("label") else kind_text(r.get("kind", ""), r.get("role", ""), lang)),
                code(shape),
                "&lt;&lt;" if r.get("deviation") == "first" else ("&lt;" if r.get("deviation") else ""),
            ]
        )
    return out, marked


def trace_html(result: Any) -> str:
    """``anatomy.trace``'s result: the rows (cell and line, code, op, the post's step, shape), the deviations."""
    lang = getattr(result, "lang", "en")
    zh = lang == "zh"
    title = f"anatomy trace · {esc(result.target)}"
    if result.trace is None:
        return (
            f'<div style="{BOX}"><b>{title}</b> {badge("error")}<p style="color:{RED}">{esc(result.text())}</p></div>'
        )
    t = result.trace
    sizes = ", ".join(f"{k}={v}" for k, v in t.sizes.items())
    rows, marked = _trace_rows(result.rows, lang)
    header = (
        ["哪里", "你的代码", "op", "博文步骤", "形状", ""]
        if zh
        else ["where", "your code", "op", "post's step", "shape", ""]
    )
    verdict = badge(
        result.verdict,
        ("符合博文流程" if zh else "follows the post")
        if result.ok
        else ("偏离博文流程" if zh else "leaves the post's flow"),
    )
    parts = [f'<div style="{BOX}"><b>{title}</b> {verdict} {code(t.call)} · {esc(sizes)}', table(header, rows, marked)]
    for d in result.lines[:1]:
        parts.append(
            f'<p style="color:{RED}">&lt;&lt; {esc(d["where"])} {code(d["source"])}: '
            f"{esc(d['zh'] if zh else d['en'])}<br>{'博文的做法' if zh else 'the post expects'}: "
            f"{esc(d.get('expected'))}</p>"
        )
    parts.append(folded(result.text(), "完整表格" if zh else "the table as `anatomy trace` prints it"))
    return "".join(parts) + "</div>"


def model_trace_html(rows: list[Any], title: str = "") -> str:
    """The post's §5.1 table of one of our models (``anatomy.inspection.trace.trace_model``'s rows)."""
    from anatomy.inspection.trace import render

    dicts = [r.to_dict() if hasattr(r, "to_dict") else dict(vars(r)) for r in rows]
    keys = [k for k in (dicts[0] if dicts else {}) if not k.startswith("_")]
    body = [[code(d[k]) if isinstance(d[k], (list, tuple)) else esc(d[k]) for k in keys] for d in dicts]
    return (
        f'<div style="{BOX}"><b>{esc(title or "anatomy trace")}</b>'
        + table([esc(k) for k in keys], body)
        + folded(render(rows, "table", title=title), "the table as `anatomy trace` prints it")
        + "</div>"
    )


def course_html(result: Any, lang: str = "en") -> str:
    """A course result (``anatomy.course.grade``): pass or the pitfall, the lines, the grader's text."""
    zh = lang == "zh"
    ok = bool(getattr(result, "ok", getattr(result, "passed", False)))
    exercise = getattr(result, "exercise", None) or getattr(result, "exercise_id", None) or ""
    verdict = getattr(result, "verdict", None) or ("pass" if ok else "fail")
    label = ("通过" if zh else "PASS") if ok else ("还没通过" if zh else "NOT YET")
    parts = [
        f'<div style="{BOX}"><b>anatomy learn · {esc(exercise)}</b> {badge("pass" if ok else "fail", label)}'
        f" {esc(verdict if verdict not in ('pass', 'fail') else '')}"
    ]
    pitfalls = list(getattr(result, "pitfalls", None) or ([result.pitfall] if getattr(result, "pitfall", None) else []))
    if pitfalls:
        parts.append("<p>" + ("坑" if zh else "pitfall") + ": " + ", ".join(code(p) for p in pitfalls) + "</p>")
    lines = getattr(result, "lines", None)
    if isinstance(lines, list) and lines and isinstance(lines[0], dict):
        parts.append(_lines_table(lines, lang))
    text = result.render(lang) if hasattr(result, "render") else str(result)
    parts.append(f'<pre style="{CODE};white-space:pre-wrap">{esc(text)}</pre>')
    return "".join(parts) + "</div>"


def verdict_html(verdict: Any, lang: str = "en") -> str:
    """One claim's ``Verdict`` (``anatomy.experiments.registry``)."""
    reason = verdict.reason_zh if lang == "zh" else verdict.reason_en
    return f'<div style="{BOX}">{badge(verdict.verdict)} {esc(reason)}</div>'


def claims_html(doc: dict[str, Any], lang: str = "en") -> str:
    """The claims lab's document (``run_claims``'s return, ``claims.json``): one row per claim and its verdict."""
    zh = lang == "zh"
    rows = []
    for c in doc.get("claims", []):
        rows.append(
            [
                esc(c.get("id")),
                esc(c.get("section")),
                esc(c.get("statement_zh") if zh else c.get("statement_en") or c.get("statement_zh")),
                badge(c.get("verdict", "")),
                esc(c.get("reason_zh") if zh else c.get("reason_en")),
            ]
        )
    header = ["编号", "节", "论断", "结论", "理由"] if zh else ["claim", "section", "statement", "verdict", "why"]
    return f'<div style="{BOX}"><b>anatomy claims</b>{table(header, rows)}</div>'
