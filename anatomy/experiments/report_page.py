"""``index.html`` of the claims report: one page, read in the post's order.

At the top, the verdicts counted (each count a button that shows only the claims with that verdict) and every claim
as a coloured chip; beside the text, the post's sections as navigation; then each section of the post with its
claims. A figure that several claims share is drawn once, full width, after the first claim that uses it; the others
link to it. CSS and JavaScript are inline and the page loads nothing from the network: the figures are the PNG files
of the report's ``figures/`` folder beside it. Everything shown comes from claims.json.
"""

from __future__ import annotations

import html
import json
import re
from collections import Counter
from pathlib import PurePosixPath
from typing import Any

BADGE = {"supported": "✓", "refuted": "✗", "nuanced": "≈", "inconclusive": "?"}  # plain symbols: no emoji font needed
ZH_VERDICT = {"supported": "成立", "refuted": "不成立", "nuanced": "有条件成立", "inconclusive": "无定论"}

# the post's sections, in its order: (Chinese, English) short titles of our own wording
SECTIONS: dict[str, tuple[str, str]] = {
    "§1": ("多头到底“多”在哪里", "What more heads add"),
    "§1.1": ("单头注意力的局限", "What one head cannot do"),
    "§1.2": ("多个子空间视图", "Several subspace views"),
    "§1.3": ("缩放因子 √d_k", "Why scores are scaled by √d_k"),
    "§2": ("Multi-Head 的工程实现", "Implementing multi-head attention"),
    "§2.1": ("完整的维度流转", "Every shape from input to output"),
    "§2.2": ("一次 reshape 拆头与并头", "One reshape to split and merge heads"),
    "§2.3": ("头数、维度与初始化", "Heads, widths and initialisation"),
    "§2.4": ("两种 mask", "The two masks"),
    "§3": ("位置编码", "Positional encoding"),
    "§3.1": ("Self-Attention 本身无序", "Attention has no order"),
    "§3.2": ("正弦位置编码的直觉", "The sinusoidal formula"),
    "§3.3": ("可学习位置编码", "Learned positions"),
    "§4": ("Add & Norm", "Add & Norm"),
    "§4.1": ("残差连接与网络退化", "Residuals against degradation"),
    "§4.2": ("LayerNorm 而非 BatchNorm", "LayerNorm, not BatchNorm"),
    "§4.3": ("Post-Norm 与 Pre-Norm", "Post-Norm or Pre-Norm"),
    "§5": ("一个 Block 的完整前向", "One block's forward pass"),
    "§5.1": ("分步推演", "Step by step"),
    "§5.2": ("三个低级错误", "Three low-level mistakes"),
    "§5.3": ("Block 级伪代码", "The block in pseudocode"),
    "结尾": ("结尾", "Closing"),
}


def section_key(section: str) -> str:
    """Where a claim is filed: its first section (``§1.1–1.2`` → ``§1.1``)."""
    match = re.match(r"§\d+(\.\d+)?", section.strip())
    return match.group(0) if match else section.strip()


def chapter_of(key: str) -> str:
    return key.split(".")[0] if key.startswith("§") else key


def anchor(key: str) -> str:
    """``§1.1`` → ``sec-1-1``; other names by their code points (a valid, stable id)."""
    if key.startswith("§"):
        return "sec-" + key[1:].replace(".", "-")
    return "sec-" + "-".join(f"{ord(ch):x}" for ch in key)


def _title(key: str) -> str:
    zh, en = SECTIONS.get(key, (key, ""))
    return f"{key} {zh}" + (f" · {en}" if en and en != zh else "") if key.startswith("§") else f"{zh} · {en}"


def _order(claims: list[dict[str, Any]]) -> list[str]:
    """The sections that hold claims, in the post's order (unknown ones after, as they come)."""
    present = list(dict.fromkeys(section_key(c["section"]) for c in claims))
    known = [k for k in SECTIONS if k in present]
    return known + [k for k in present if k not in SECTIONS]


def _short(claim_id: str) -> str:
    return claim_id.split("-")[0]


def _metric_cell(m: dict[str, Any]) -> str:
    def f(x: Any) -> str:
        return x if isinstance(x, str) else f"{x:.4g}"

    if m["n"] == 1:
        return f"{f(m['mean'])}{m['unit']}"
    lo, hi = m["ci95"]
    return f"{f(m['mean'])} ± {f(m['std'])}{m['unit']} (95% CI {f(lo)} … {f(hi)})"


def figure_owners(claims: list[dict[str, Any]]) -> dict[str, list[str]]:
    """Each figure → the ids of the claims that show it, in page order (the first one draws it)."""
    owners: dict[str, list[str]] = {}
    for key in _order(claims):
        for c in claims:
            if section_key(c["section"]) == key:
                for fig in dict.fromkeys(c["figures"]):
                    owners.setdefault(fig, []).append(c["id"])
    return owners


def _fig_name(path: str) -> str:
    return PurePosixPath(path).stem


def render_page(doc: dict[str, Any]) -> str:
    e = html.escape
    claims = doc["claims"]
    owners = figure_owners(claims)
    fig_id = {fig: f"fig-{i + 1}" for i, fig in enumerate(owners)}
    counts = Counter(c["verdict"] for c in claims)

    buttons = [f'<button type="button" data-filter="all" aria-pressed="true">all · 全部 <b>{len(claims)}</b></button>']
    buttons += [
        f'<button type="button" data-filter="{v}" class="{v}" aria-pressed="false">{BADGE[v]} {v} · '
        f"{ZH_VERDICT[v]} <b>{counts.get(v, 0)}</b></button>"
        for v in BADGE
    ]
    chips = "".join(
        f'<a class="chip {e(c["verdict"])}" href="#{e(c["id"])}" title="{e(c["statement_en"])}">'
        f"{e(_short(c['id']))}</a>"
        for c in claims
    )

    nav, body = [], []
    open_chapter = None
    for key in _order(claims):
        members = [c for c in claims if section_key(c["section"]) == key]
        chapter = chapter_of(key)
        if chapter != open_chapter:
            if open_chapter is not None:
                nav.append("</ol></li>")
            heading = _title(chapter)
            nav.append(f'<li class="chapter"><span>{e(heading)}</span><ol>')
            open_chapter = chapter
        nav.append(
            f'<li data-section="{anchor(key)}"><a href="#{anchor(key)}">{e(_title(key))}</a> '
            f'<span class="n">{len(members)}</span></li>'
        )
        parts = [f'<section class="post-section" id="{anchor(key)}"><h2>{e(_title(key))}</h2>']
        for c in members:
            parts.append(_claim(c, owners, fig_id))
            for fig in dict.fromkeys(c["figures"]):
                if owners[fig][0] == c["id"]:
                    users = ", ".join(_short(i) for i in owners[fig])
                    parts.append(
                        f'<figure id="{fig_id[fig]}" data-claims="{e(" ".join(owners[fig]))}">'
                        f'<a href="{e(fig)}"><img src="{e(fig)}" alt="{e(_fig_name(fig))}" loading="lazy"></a>'
                        f"<figcaption>{e(_fig_name(fig))} · {e(users)}</figcaption></figure>"
                    )
        parts.append("</section>")
        body.append("".join(parts))
    if open_chapter is not None:
        nav.append("</ol></li>")

    env = doc["environment"]
    device = env.get("device", "cpu")
    meta = (
        f"Preset <code>{e(doc['preset'])}</code>, {doc['seeds']} seed(s); torch {e(env['torch'])}, "
        f"{e(str(env.get('threads', '?')))} thread(s){'' if device == 'cpu' else ', device ' + e(device)}. "
        "Every verdict is computed from the numbers of this run by a rule declared before it."
    )
    return _PAGE.format(
        meta=meta,
        buttons="".join(buttons),
        chips=chips,
        nav="".join(nav),
        body="".join(body),
        data=e(json.dumps({"claims": len(claims), "figures": len(owners)})),
    )


def _claim(c: dict[str, Any], owners: dict[str, list[str]], fig_id: dict[str, str]) -> str:
    e = html.escape
    v = c["verdict"]
    metrics = "".join(
        f"<tr><td><code>{e(n)}</code></td><td>{e(_metric_cell(m))}</td></tr>" for n, m in c["metrics"].items()
    )
    refs = []
    for fig in dict.fromkeys(c["figures"]):
        first = owners[fig][0]
        where = "below" if first == c["id"] else f"shown with {_short(first)}"
        refs.append(f'<a href="#{fig_id[fig]}">{e(_fig_name(fig))}</a> ({e(where)})')
    figures = f'<p class="figrefs">Figures · 图：{" · ".join(refs)}</p>' if refs else ""
    return f"""<article class="claim {e(v)}" id="{e(c["id"])}" data-verdict="{e(v)}">
<h3>{e(c["id"])} <span class="badge">{BADGE[v]} {e(v)} · {e(ZH_VERDICT[v])}</span></h3>
<p class="post">{e(c["section"])} 「{e(c["statement_zh"])}」</p><p>{e(c["statement_en"])}</p>
<p><b>{e(c["reason_en"])}</b><br>{e(c["reason_zh"])}</p>
<details><summary>rule · metrics · {c["runtime_s"]:.1f} s</summary><p>{e(c["rule"])}</p>
<table>{metrics}</table></details>
{figures}</article>"""


_PAGE = """<!doctype html><html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>transformer-anatomy · claims report</title><style>
body{{font-family:system-ui,"Noto Sans CJK SC","WenQuanYi Micro Hei",sans-serif;margin:0;color:#222;line-height:1.45}}
header{{max-width:1240px;margin:0 auto;padding:1em 1.5em .5em}}
.layout{{display:grid;grid-template-columns:260px minmax(0,1fr);gap:2em;max-width:1240px;margin:0 auto;padding:0 1.5em}}
nav{{position:sticky;top:0;align-self:start;max-height:100vh;overflow:auto;font-size:.9em;padding:.5em 0}}
nav ol{{list-style:none;padding-left:.8em;margin:.2em 0}} nav>ol{{padding-left:0}} nav .chapter>span{{font-weight:600}}
nav a{{color:#234;text-decoration:none}} nav a:hover{{text-decoration:underline}} nav .n{{color:#888;font-size:.85em}}
nav li.empty{{opacity:.35}}
@media (max-width:820px){{.layout{{grid-template-columns:1fr}} nav{{position:static;max-height:none}}}}
.summary{{display:flex;flex-wrap:wrap;gap:.5em;margin:.6em 0}}
.summary button{{font:inherit;padding:.35em .8em;border:2px solid #999;border-radius:6px;background:#fff;
cursor:pointer}}
.summary button[aria-pressed=true]{{background:#222;color:#fff;border-color:#222}}
.summary button.supported{{border-color:#2a9d4b}} .summary button.refuted{{border-color:#d43c3c}}
.summary button.nuanced{{border-color:#e0a31b}} .summary button.inconclusive{{border-color:#888}}
.chips{{display:flex;flex-wrap:wrap;gap:3px;margin:.4em 0 1em}}
.chip{{font-size:.75em;padding:1px 5px;border-radius:3px;color:#fff;text-decoration:none;background:#888}}
.chip.supported{{background:#2a9d4b}} .chip.refuted{{background:#d43c3c}} .chip.nuanced{{background:#c68a0c}}
.post-section{{margin:1.5em 0 2.5em}} .post-section>h2{{border-bottom:1px solid #ddd;padding-bottom:.2em}}
.claim{{border-left:6px solid #aaa;padding:.2em 1em;margin:1.2em 0}} .claim.supported{{border-color:#2a9d4b}}
.claim.refuted{{border-color:#d43c3c}} .claim.nuanced{{border-color:#e0a31b}} .claim.inconclusive{{border-color:#888}}
.badge{{font-size:.7em;font-weight:normal}} .post{{color:#555}} .figrefs{{font-size:.9em}}
figure{{margin:1em 0 2em;text-align:center}} figure img{{max-width:100%;height:auto;border:1px solid #ddd}}
figcaption{{font-size:.85em;color:#555}} [hidden]{{display:none!important}}
table{{border-collapse:collapse}} td{{border:1px solid #ddd;padding:2px 6px;font-size:.9em}}</style></head><body>
<header><h1>The post's claims, measured · 博文论断实验报告</h1><p>{meta}
<a href="report.md">report.md</a> · <a href="report.zh.md">report.zh.md</a> · <a href="claims.json">claims.json</a></p>
<div class="summary" role="group" aria-label="show the claims with one verdict">{buttons}</div>
<div class="chips">{chips}</div><p id="shown" aria-live="polite"></p></header>
<div class="layout"><nav aria-label="the post's sections"><ol>{nav}</ol></nav>
<main data-report="{data}">{body}</main></div>
<script>
(function () {{
  var claims = Array.prototype.slice.call(document.querySelectorAll("article.claim"));
  var byId = {{}};
  claims.forEach(function (c) {{ byId[c.id] = c; }});
  var figures = Array.prototype.slice.call(document.querySelectorAll("figure[data-claims]"));
  var sections = Array.prototype.slice.call(document.querySelectorAll("section.post-section"));
  var buttons = Array.prototype.slice.call(document.querySelectorAll(".summary button"));
  function show(verdict) {{
    claims.forEach(function (c) {{ c.hidden = verdict !== "all" && c.dataset.verdict !== verdict; }});
    figures.forEach(function (f) {{
      f.hidden = !f.dataset.claims.split(" ").some(function (id) {{ return byId[id] && !byId[id].hidden; }});
    }});
    sections.forEach(function (s) {{
      s.hidden = !s.querySelector("article.claim:not([hidden])");
      var item = document.querySelector('nav li[data-section="' + s.id + '"]');
      if (item) item.classList.toggle("empty", s.hidden);
    }});
    document.querySelectorAll(".chip").forEach(function (a) {{
      var c = byId[a.getAttribute("href").slice(1)];
      a.style.opacity = c && c.hidden ? "0.25" : "";
    }});
    buttons.forEach(function (b) {{ b.setAttribute("aria-pressed", String(b.dataset.filter === verdict)); }});
    var n = claims.filter(function (c) {{ return !c.hidden; }}).length;
    document.getElementById("shown").textContent = verdict === "all" ? "" :
      n + " of " + claims.length + " claims shown (" + verdict + ")";
  }}
  buttons.forEach(function (b) {{ b.addEventListener("click", function () {{ show(b.dataset.filter); }}); }});
  document.addEventListener("click", function (ev) {{
    var a = ev.target.closest && ev.target.closest("a[href^='#']");
    if (!a) return;
    var target = document.getElementById(a.getAttribute("href").slice(1));
    if (target && (target.hidden || target.closest("[hidden]"))) show("all");  // a link never lands on nothing
  }}, true);
}})();
</script></body></html>
"""
