"""Write the claims report from claims.json: report.md (English), report.zh.md (Chinese), index.html.

Every sentence about a result comes from the stored numbers (the rule's reason, the metrics table); nothing
here knows a verdict in advance.
"""

from __future__ import annotations

import html
import json
from collections import Counter
from pathlib import Path
from typing import Any

BADGE = {"supported": "✓", "refuted": "✗", "nuanced": "≈", "inconclusive": "?"}  # plain symbols: no emoji font needed
ZH_VERDICT = {"supported": "成立", "refuted": "不成立", "nuanced": "有条件成立", "inconclusive": "无定论"}


def _metric_cell(m: dict[str, Any]) -> str:
    def f(x: float | str) -> str:
        return x if isinstance(x, str) else f"{x:.4g}"

    if m["n"] == 1:
        return f"{f(m['mean'])}{m['unit']}"
    lo, hi = m["ci95"]
    return f"{f(m['mean'])} ± {f(m['std'])}{m['unit']} (95% CI {f(lo)} … {f(hi)})"


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
    e = html.escape
    rows = []
    for c in doc["claims"]:
        figs = "".join(
            f'<a href="{e(f)}"><img src="{e(f)}" alt="{e(c["id"])}" loading="lazy"></a>'
            for f in dict.fromkeys(c["figures"])
        )
        metrics = "".join(
            f"<tr><td><code>{e(n)}</code></td><td>{e(_metric_cell(m))}</td></tr>" for n, m in c["metrics"].items()
        )
        rows.append(f"""<section id="{e(c["id"])}" class="{e(c["verdict"])}">
<h2>{e(c["id"])} <span class="badge">{BADGE[c["verdict"]]} {e(c["verdict"])} · {e(ZH_VERDICT[c["verdict"]])}</span></h2>
<p class="post">{e(c["section"])} 「{e(c["statement_zh"])}」</p><p>{e(c["statement_en"])}</p>
<p><b>{e(c["reason_en"])}</b><br>{e(c["reason_zh"])}</p>
<details><summary>rule · metrics</summary><p>{e(c["rule"])}</p><table>{metrics}</table></details>
<div class="figs">{figs}</div></section>""")
    counts = Counter(c["verdict"] for c in doc["claims"])
    summary = " · ".join(f"{BADGE[v]} {v} {counts.get(v, 0)}" for v in BADGE)
    return f"""<!doctype html><html lang="en"><head><meta charset="utf-8">
<title>transformer-anatomy · claims report</title><style>
body{{font-family:system-ui,"Noto Sans CJK SC","WenQuanYi Micro Hei",sans-serif;max-width:980px;
margin:2em auto;padding:0 1em;color:#222}}
section{{border-left:6px solid #aaa;padding:.2em 1em;margin:1.2em 0}} .supported{{border-color:#2a9d4b}}
.refuted{{border-color:#d43c3c}} .nuanced{{border-color:#e0a31b}} .inconclusive{{border-color:#888}}
.badge{{font-size:.7em;font-weight:normal}} .post{{color:#555}} img{{max-width:300px;margin:4px;border:1px solid #ddd}}
table{{border-collapse:collapse}} td{{border:1px solid #ddd;padding:2px 6px;font-size:.9em}}</style></head><body>
<h1>The post's claims, measured · 博文论断实验报告</h1>
<p>Preset <code>{e(doc["preset"])}</code>, {doc["seeds"]} seed(s); torch {e(doc["environment"]["torch"])}.
{summary}. <a href="report.md">report.md</a> · <a href="report.zh.md">report.zh.md</a> ·
<a href="claims.json">claims.json</a></p>
{"".join(rows)}</body></html>"""


def write_reports(doc: dict[str, Any], out: str | Path) -> None:
    out = Path(out)
    (out / "report.md").write_text(render_markdown(doc, "en"), encoding="utf-8")
    (out / "report.zh.md").write_text(render_markdown(doc, "zh"), encoding="utf-8")
    (out / "index.html").write_text(render_html(doc), encoding="utf-8")


def load(out: str | Path) -> dict[str, Any]:
    path = Path(out) / "claims.json"
    if not path.is_file():
        raise ValueError(f"{out} holds no claims.json (run `anatomy claims run ... --out {out}` first)")
    doc: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
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
