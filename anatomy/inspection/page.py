"""One self-contained HTML page to look around a model: the shape trace, attention maps, positional encodings.

Everything the page needs is inside the file: the data as inline JSON, the CSS and a small vanilla-JS viewer
(kept as package data, ``assets/page.css`` and ``assets/page.js``, and inlined when the page is rendered).
It requests nothing from the network (no CDN, no fonts, no favicon), so it opens offline and can be attached to
an issue or a CI run. Labels are bilingual (中文 / English); the browser draws Chinese with the system's fonts.

* 形状追踪 · shape trace: the post's §5.1 table from a real forward pass (:mod:`anatomy.inspection.trace`);
* 注意力 · attention: choose a layer and a head; every weight is printed in its cell (3 decimals) and shown in
  full on hover; thumbnails of all heads of the layer, each with its entropy;
* 位置编码 · positional encodings: the four views of :func:`anatomy.inspection.viz_pe.positional_data` per scheme,
  with hover read-outs.
"""

from __future__ import annotations

import functools
import html
import json
import os
from collections.abc import Sequence
from importlib import resources
from typing import Any

import torch
from torch import nn

from anatomy.inspection.pe_views import PEData
from anatomy.inspection.trace import TraceRow, trace_model
from anatomy.inspection.viz_pe import PE_KINDS, positional_data
from anatomy.inspection.weights import LayerWeights, attention_weights

DIGITS = 3  # decimals printed in the attention cells


@functools.cache
def asset(name: str) -> str:
    """The text of a package data file of the page (``page.css``, ``page.js`` in ``anatomy/inspection/assets``),
    inlined by :func:`render_page` so that the page stays one self-contained file."""
    return (resources.files("anatomy.inspection") / "assets" / name).read_text(encoding="utf-8")


def attention_payload(
    layers: Sequence[LayerWeights], q_tokens: Sequence[str], k_tokens: Sequence[str] | None = None, *, batch: int = 0
) -> dict[str, Any]:
    """JSON-ready weights of batch row ``batch``: per layer, per head, ``T × S`` (6 decimals kept)."""
    k_tokens = list(q_tokens) if k_tokens is None else list(k_tokens)
    out = []
    for layer in layers:
        w = layer.weights[batch].double()  # (h, T, S)
        t, s = w.shape[-2:]
        out.append(
            {
                "index": layer.index,
                "name": layer.name,
                "cross": layer.cross,
                "heads": list(layer.heads),
                "entropy": [round(float(e), 4) for e in layer.entropy(batch)],
                "q_tokens": list(q_tokens)[:t],
                "k_tokens": k_tokens[:s],
                "weights": [[[round(float(v), 6) for v in row] for row in head] for head in w],
            }
        )
    return {"layers": out, "digits": DIGITS}


def _trace_html(rows: Sequence[TraceRow]) -> str:
    head = (
        "<tr><th>#</th><th>位置 · where</th><th>操作 · operation</th><th>输出形状 · output shape</th>"
        "<th>参数 · params</th></tr>"
    )
    body = []
    for i, r in enumerate(rows):
        body.append(
            f"<tr class='kind-{html.escape(r.kind)}'><td>{i + 1}</td><td>{html.escape(r.step)}</td>"
            f"<td>{html.escape(r.operation_zh)}<br><span class='en'>{html.escape(r.operation)}</span></td>"
            f"<td><code>{html.escape(r.dims)}</code></td><td>{f'{r.params:,}' if r.params else ''}</td></tr>"
        )
    return f"<table id='trace-table' class='trace'>{head}{''.join(body)}</table>"


def render_page(
    *,
    title: str,
    subtitle: str = "",
    notes: Sequence[str] = (),
    trace: Sequence[TraceRow] | None = None,
    attention: dict[str, Any] | None = None,
    pe: Sequence[PEData] | None = None,
    figures: Sequence[tuple[str, str]] = (),
    tables: Sequence[tuple[str, Sequence[str], list[list[str]]]] = (),
) -> str:
    """Assemble the page. ``figures``: (caption, inline SVG); ``tables``: (caption, header, rows of strings)."""
    data = {"attention": attention, "pe": None if pe is None else [p.to_dict() for p in pe]}
    payload = json.dumps(data, ensure_ascii=False, separators=(",", ":")).replace("</", "<\\/")
    sections = []
    if trace is not None:
        sections.append(
            "<section id='trace'><details open><summary><h2>形状追踪 · Shape trace</h2></summary>"
            "<p class='hint'>每一步的输出形状，来自一次真实的前向传播 · the output shape of every step of "
            f"one real forward pass (post §5.1).</p>{_trace_html(trace)}</details></section>"
        )
    if attention is not None:
        sections.append(_ATTENTION_HTML)
    if pe is not None:
        sections.append(_PE_HTML)
    for caption, svg in figures:
        sections.append(f"<section class='figure'><h2>{html.escape(caption)}</h2>{svg}</section>")
    for caption, header, rows in tables:
        head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
        body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
        sections.append(
            f"<section><h2>{html.escape(caption)}</h2><table class='plain'><tr>{head}</tr>{body}</table></section>"
        )
    note_html = "".join(f"<p class='note'>{html.escape(n)}</p>" for n in notes)
    return _PAGE.format(
        title=html.escape(title),
        subtitle=html.escape(subtitle),
        notes=note_html,
        sections="\n".join(sections),
        css=asset("page.css"),
        data=payload,
        js=asset("page.js"),
    )


def write_page(path: str | os.PathLike[str], page: str) -> str:
    path = os.fspath(path)
    if not path.lower().endswith(".html"):
        raise ValueError(f"--out must end in .html for a page, got {path!r}")
    with open(path, "w", encoding="utf-8") as f:
        f.write(page)
    return path


def model_page(
    model: nn.Module,
    inputs: dict[str, torch.Tensor],
    tokens: Sequence[str],
    *,
    title: str,
    subtitle: str = "",
    notes: Sequence[str] = (),
    pe_kinds: Sequence[str] = PE_KINDS,
    pe_size: dict[str, int] | None = None,
) -> str:
    """Trace ``model`` on ``inputs``, recompute every layer's attention weights beside its own kernel, and add the
    positional-encoding explorer. ``tokens`` label the weights (batch row 0)."""
    was_training = model.training
    model.eval()
    try:
        rows = trace_model(model, inputs)
        with torch.no_grad(), attention_weights(model) as maps:
            model(**inputs)
    finally:
        model.train(was_training)
    layers = [maps[i] for i in sorted(maps)]
    pe = [positional_data(kind, **(pe_size or {})) for kind in pe_kinds]
    return render_page(
        title=title, subtitle=subtitle, notes=notes, trace=rows, attention=attention_payload(layers, tokens), pe=pe
    )


_PAGE = """<!DOCTYPE html>
<html lang="zh-CN">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">
<title>{title}</title>
<style>
{css}</style>
</head>
<body>
<header><h1>{title}</h1><p class="sub">{subtitle}</p>{notes}</header>
<main>
{sections}
</main>
<footer>transformer-anatomy · 离线单文件页面，不访问网络 · self-contained, no network</footer>
<script type="application/json" id="anatomy-data">{data}</script>
<script>
{js}</script>
</body>
</html>
"""

_ATTENTION_HTML = """<section id="attention">
<h2>注意力图 · Attention maps</h2>
<p class="hint">选择层和头；每个格子是查询（行）对键（列）的权重，悬停查看完整数值 ·
choose a layer and a head; each cell is the weight of a query (row) on a key (column); hover for the full value.</p>
<div class="controls">
<label>层 layer <select id="layer-select"></select></label>
<label>头 head <select id="head-select"></select></label>
<span id="attn-info"></span>
</div>
<div id="attn-thumbs"></div>
<div id="attn-hover" class="readout">悬停在格子上 · hover a cell</div>
<div class="scroll"><table id="attn-table" class="heat"></table></div>
</section>"""

_PE_HTML = """<section id="pe">
<h2>位置编码 · Positional encodings</h2>
<p class="hint">表、几个维度的波形、与相对偏移的相似度、超出训练长度之后 ·
the table, a few dimensions as waves, similarity against the relative offset, and what happens past the
training length. Hover for values.</p>
<div class="controls"><label>方案 scheme <select id="pe-select"></select></label></div>
<p id="pe-note" class="note"></p>
<div id="pe-readout" class="readout">悬停查看数值 · hover for values</div>
<div id="pe-panels" class="grid"></div>
</section>"""
