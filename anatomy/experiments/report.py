"""Write the claims report from claims.json: report.md (English), report.zh.md (Chinese), index.html.

Every sentence about a result comes from the stored numbers (the rule's reason, the metrics table); nothing
here knows a verdict in advance.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from anatomy.experiments.report_page import BADGE, ZH_VERDICT, render_page
from anatomy.experiments.report_page import _metric_cell as _metric_cell


def _device_line(doc: dict[str, Any], zh: bool) -> str:
    """The device of a run that was not on the CPU, and the experiments that stayed there (``cpu_only``)."""
    device = doc["environment"].get("device", "cpu")
    if device == "cpu":
        return ""
    stayed = sorted({c["experiment"] for c in doc["claims"] if c.get("cpu_only")})
    if zh:
        return f"，设备 {device}" + (f"（{'、'.join(stayed)} 只能在 CPU 上运行，见 claims.json）" if stayed else "")
    return f", device {device}" + (
        f" ({', '.join(stayed)} ran on the CPU: see cpu_only in claims.json)" if stayed else ""
    )


def render_markdown(doc: dict[str, Any], lang: str = "en") -> str:
    zh = lang == "zh"
    counts = Counter(c["verdict"] for c in doc["claims"])
    title = "博文论断实验报告" if zh else "The post's claims, measured"
    lines = [f"# {title}", ""]
    where = _device_line(doc, zh)
    if zh:
        lines += [
            f"预设 `{doc['preset']}`，每个实验 {doc['seeds']} 个随机种子；torch {doc['environment']['torch']}，"
            f"{doc['environment']['threads']} 线程{where}。结论由运行中测得的数字按事先声明的规则得出。",
            "",
        ]
        lines += ["结论统计：" + "，".join(f"{ZH_VERDICT[v]} {counts.get(v, 0)}" for v in BADGE), ""]
    else:
        env = doc["environment"]
        lines += [
            f"Preset `{doc['preset']}`, {doc['seeds']} seed(s) per experiment; torch {env['torch']}, "
            f"{env['threads']} threads{where}. Every verdict is computed from the numbers measured in "
            "this run by a rule declared in the claim's code before the run.",
            "",
        ]
        lines += ["Verdicts: " + ", ".join(f"{v} {counts.get(v, 0)}" for v in BADGE), ""]
    lines += ["| # | " + ("论断" if zh else "claim") + " | " + ("结论" if zh else "verdict") + " |", "|---|---|---|"]
    for c in doc["claims"]:
        statement = c["statement_zh"] if zh else c["statement_en"]
        verdict = ZH_VERDICT[c["verdict"]] if zh else c["verdict"]
        anchor = f"[{c['id'].split('-')[0]}](#{c['id'].lower()})"
        lines.append(f"| {anchor} | {statement} | {BADGE[c['verdict']]} {verdict} |")
    lines.append("")
    for c in doc["claims"]:
        lines += [
            f"## {c['id']}",
            "",
            f"**{c['section']}** · "
            + (f"原文：「{c['statement_zh']}」" if zh else f"{c['statement_en']}  \n*Post:* 「{c['statement_zh']}」"),
            "",
        ]
        verdict = ZH_VERDICT[c["verdict"]] if zh else c["verdict"]
        reason = c["reason_zh"] if zh else c["reason_en"]
        lines += [f"{BADGE[c['verdict']]} **{verdict}** — {reason}", ""]
        lines += [("判定规则（运行前声明）：" if zh else "Rule (declared before the run): ") + c["rule"], ""]
        lines += ["| " + ("指标" if zh else "metric") + " | " + ("数值" if zh else "value") + " |", "|---|---|"]
        lines += [f"| `{name}` | {_metric_cell(m)} |" for name, m in c["metrics"].items()]
        lines.append("")
        for fig in dict.fromkeys(c["figures"]):
            lines += [f"![{c['id']}]({fig})", ""]
        lines += [("耗时" if zh else "runtime") + f": {c['runtime_s']:.1f} s", ""]
    return "\n".join(lines)


def render_html(doc: dict[str, Any]) -> str:
    """index.html: the post's sections as navigation, the verdicts counted and filterable, each figure once
    (anatomy.experiments.report_page)."""
    return render_page(doc)


def write_reports(doc: dict[str, Any], out: str | Path) -> None:
    out = Path(out)
    (out / "report.md").write_text(render_markdown(doc, "en"), encoding="utf-8")
    (out / "report.zh.md").write_text(render_markdown(doc, "zh"), encoding="utf-8")
    (out / "index.html").write_text(render_html(doc), encoding="utf-8")


def load(out: str | Path) -> dict[str, Any]:
    path = Path(out) / "claims.json"
    if not path.is_file():
        raise ValueError(f"{out} holds no claims.json (run `anatomy claims run ... --out {out}` first)")
    from anatomy.files import read_json

    doc: dict[str, Any] = read_json(path, what="the claims lab's document (a JSON object)")  # BadJSON: one line
    return doc


def merge(sources: list[str | Path], out: str | Path) -> dict[str, Any]:
    """Combine runs made in parallel (same preset and seeds, different claims) into one report in ``out``."""
    import shutil

    docs = [load(s) for s in sources]
    first = docs[0]
    for src, doc in zip(sources, docs):
        if (doc["preset"], doc["seeds"]) != (first["preset"], first["seeds"]):
            raise ValueError(
                f"{src} was run with preset {doc['preset']!r} and {doc['seeds']} seeds, "
                f"{sources[0]} with {first['preset']!r} and {first['seeds']}: they cannot be merged"
            )
    out = Path(out)
    (out / "figures").mkdir(parents=True, exist_ok=True)
    claims: dict[str, dict[str, Any]] = {}
    for src, doc in zip(sources, docs):
        for c in doc["claims"]:
            claims[c["id"]] = c
        figures = Path(src) / "figures"
        if figures.is_dir() and figures.resolve() != (out / "figures").resolve():
            for f in figures.iterdir():
                shutil.copy2(f, out / "figures" / f.name)
    merged = {
        **first,
        "created": max(d["created"] for d in docs),
        "claims": sorted(claims.values(), key=lambda c: int(c["id"][1:].split("-")[0])),
    }
    (out / "claims.json").write_text(json.dumps(merged, indent=2, ensure_ascii=False), encoding="utf-8")
    write_reports(merged, out)
    return merged
