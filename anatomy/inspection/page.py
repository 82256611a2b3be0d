"""One self-contained HTML page to look around a model: the shape trace, attention maps, positional encodings.

Everything the page needs is inside the file: the data as inline JSON, the CSS and a small vanilla-JS viewer.
It requests nothing from the network (no CDN, no fonts, no favicon), so it opens offline and can be attached to
an issue or a CI run. Labels are bilingual (中文 / English); the browser draws Chinese with the system's fonts.

* 形状追踪 · shape trace: the post's §5.1 table from a real forward pass (:mod:`anatomy.inspection.trace`);
* 注意力 · attention: choose a layer and a head; every weight is printed in its cell (3 decimals) and shown in
  full on hover; thumbnails of all heads of the layer, each with its entropy;
* 位置编码 · positional encodings: the four views of :func:`anatomy.inspection.viz.positional_data` per scheme,
  with hover read-outs.
"""

from __future__ import annotations

import html
import json
import os
from collections.abc import Sequence

import torch
from torch import nn

from anatomy.inspection.trace import TraceRow, trace_model
from anatomy.inspection.viz import PE_KINDS, PEData, positional_data
from anatomy.inspection.weights import LayerWeights, attention_weights

DIGITS = 3  # decimals printed in the attention cells


def attention_payload(layers: Sequence[LayerWeights], q_tokens: Sequence[str],
                      k_tokens: Sequence[str] | None = None, *, batch: int = 0) -> dict:
    """JSON-ready weights of batch row ``batch``: per layer, per head, ``T × S`` (6 decimals kept)."""
    k_tokens = list(q_tokens) if k_tokens is None else list(k_tokens)
    out = []
    for layer in layers:
        w = layer.weights[batch].double()  # (h, T, S)
        t, s = w.shape[-2:]
        out.append({
            "index": layer.index, "name": layer.name, "cross": layer.cross, "heads": list(layer.heads),
            "entropy": [round(float(e), 4) for e in layer.entropy(batch)],
            "q_tokens": list(q_tokens)[:t], "k_tokens": k_tokens[:s],
            "weights": [[[round(float(v), 6) for v in row] for row in head] for head in w],
        })
    return {"layers": out, "digits": DIGITS}


def _trace_html(rows: Sequence[TraceRow]) -> str:
    head = "<tr><th>#</th><th>位置 · where</th><th>操作 · operation</th><th>输出形状 · output shape</th>" \
           "<th>参数 · params</th></tr>"
    body = []
    for i, r in enumerate(rows):
        body.append(
            f"<tr class='kind-{html.escape(r.kind)}'><td>{i + 1}</td><td>{html.escape(r.step)}</td>"
            f"<td>{html.escape(r.operation_zh)}<br><span class='en'>{html.escape(r.operation)}</span></td>"
            f"<td><code>{html.escape(r.dims)}</code></td><td>{f'{r.params:,}' if r.params else ''}</td></tr>")
    return f"<table id='trace-table' class='trace'>{head}{''.join(body)}</table>"


def render_page(*, title: str, subtitle: str = "", notes: Sequence[str] = (), trace: Sequence[TraceRow] | None = None,
                attention: dict | None = None, pe: Sequence[PEData] | None = None,
                figures: Sequence[tuple[str, str]] = (), tables: Sequence[tuple[str, Sequence[str], list]] = ()) -> str:
    """Assemble the page. ``figures``: (caption, inline SVG); ``tables``: (caption, header, rows of strings)."""
    data = {"attention": attention, "pe": None if pe is None else [p.to_dict() for p in pe]}
    payload = json.dumps(data, ensure_ascii=False, separators=(",", ":")).replace("</", "<\\/")
    sections = []
    if trace is not None:
        sections.append("<section id='trace'><details open><summary><h2>形状追踪 · Shape trace</h2></summary>"
                        "<p class='hint'>每一步的输出形状，来自一次真实的前向传播 · the output shape of every step of "
                        f"one real forward pass (post §5.1).</p>{_trace_html(trace)}</details></section>")
    if attention is not None:
        sections.append(_ATTENTION_HTML)
    if pe is not None:
        sections.append(_PE_HTML)
    for caption, svg in figures:
        sections.append(f"<section class='figure'><h2>{html.escape(caption)}</h2>{svg}</section>")
    for caption, header, rows in tables:
        head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
        body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
        sections.append(f"<section><h2>{html.escape(caption)}</h2><table class='plain'><tr>{head}</tr>{body}"
                        "</table></section>")
    note_html = "".join(f"<p class='note'>{html.escape(n)}</p>" for n in notes)
    return _PAGE.format(title=html.escape(title), subtitle=html.escape(subtitle), notes=note_html,
                        sections="\n".join(sections), css=_CSS, data=payload, js=_JS)


def write_page(path: str | os.PathLike, page: str) -> str:
    path = os.fspath(path)
    if not path.lower().endswith(".html"):
        raise ValueError(f"--out must end in .html for a page, got {path!r}")
    with open(path, "w", encoding="utf-8") as f:
        f.write(page)
    return path


def model_page(model: nn.Module, inputs: dict[str, torch.Tensor], tokens: Sequence[str], *, title: str,
               subtitle: str = "", notes: Sequence[str] = (), pe_kinds: Sequence[str] = PE_KINDS,
               pe_size: dict | None = None) -> str:
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
    return render_page(title=title, subtitle=subtitle, notes=notes, trace=rows,
                       attention=attention_payload(layers, tokens), pe=pe)


_PAGE = """<!DOCTYPE html>
<html lang="zh-CN">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">
<title>{title}</title>
<style>{css}</style>
</head>
<body>
<header><h1>{title}</h1><p class="sub">{subtitle}</p>{notes}</header>
<main>
{sections}
</main>
<footer>transformer-anatomy · 离线单文件页面，不访问网络 · self-contained, no network</footer>
<script type="application/json" id="anatomy-data">{data}</script>
<script>{js}</script>
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

_CSS = """
body{font-family:"DejaVu Sans","Noto Sans CJK SC","WenQuanYi Micro Hei","PingFang SC","Microsoft YaHei",
sans-serif;margin:0;color:#1a202c;background:#fafafa}
header{padding:16px 24px;background:#2b6cb0;color:white}header h1{margin:0;font-size:22px}
.sub{margin:4px 0 0 0;opacity:.9}header .note{color:#e2e8f0;margin:4px 0 0 0;font-size:13px}
main{padding:8px 24px}section{background:white;border:1px solid #e2e8f0;border-radius:6px;margin:16px 0;
padding:12px 16px}h2{font-size:18px;margin:4px 0 8px 0}summary h2{display:inline}summary{cursor:pointer}
.hint{color:#4a5568;font-size:13px;margin:4px 0}
.note{color:#4a5568;font-size:13px}table.trace,table.plain{border-collapse:collapse;font-size:13px}
.trace td,.trace th,.plain td,.plain th{border:1px solid #e2e8f0;padding:3px 8px;text-align:left}
.trace th,.plain th{background:#edf2f7}.trace .en{color:#718096;font-size:11px}
.trace tr.kind-hidden{background:#fffbea}.controls{margin:8px 0;display:flex;gap:16px;align-items:center}
select{font-size:14px;padding:2px 4px}.readout{font-family:monospace;font-size:13px;min-height:1.4em;
margin:6px 0;color:#2d3748}.scroll{overflow:auto;max-width:100%}
table.heat{border-collapse:collapse;font-size:12px}table.heat td,table.heat th{width:38px;height:26px;
text-align:center;border:1px solid #fff;padding:0}table.heat th{background:#f7fafc;font-weight:normal}
table.heat.dense td{width:12px;height:12px;font-size:0}table.heat.dense th{font-size:9px}
td.w.sel{outline:2px solid #e53e3e}#attn-thumbs{display:flex;gap:10px;flex-wrap:wrap}
.thumb{cursor:pointer;border:2px solid transparent;text-align:center;font-size:12px}
.thumb.active{border-color:#2b6cb0}.grid{display:grid;grid-template-columns:repeat(2,minmax(300px,1fr));gap:12px}
.panel h3{font-size:14px;margin:4px 0}.panel svg{width:100%;height:auto;background:white;
border:1px solid #e2e8f0}.panel canvas{width:100%;height:300px;image-rendering:pixelated;border:1px solid #e2e8f0}
.legend span{margin-right:12px;font-size:12px}.panel .pn{font-size:12px;color:#4a5568}
footer{padding:12px 24px;color:#718096;font-size:12px}section.figure svg{max-width:100%;height:auto}
"""

_JS = r"""
(function () {
  "use strict";
  var DATA = JSON.parse(document.getElementById("anatomy-data").textContent);
  var PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b"];

  function el(tag, attrs, text) {
    var e = document.createElement(tag);
    for (var k in attrs || {}) { e.setAttribute(k, attrs[k]); }
    if (text !== undefined) { e.textContent = text; }
    return e;
  }
  function svgEl(tag, attrs) {
    var e = document.createElementNS("http://www.w3.org/2000/svg", tag);
    for (var k in attrs || {}) { e.setAttribute(k, attrs[k]); }
    return e;
  }
  function blues(v, vmax) {
    var t = vmax > 0 ? Math.max(0, Math.min(1, v / vmax)) : 0;
    return "rgb(" + Math.round(247 - 239 * t) + "," + Math.round(251 - 203 * t) + "," + Math.round(255 - 148 * t) + ")";
  }
  function diverging(v, lim) {
    var t = lim > 0 ? Math.max(-1, Math.min(1, v / lim)) : 0;
    if (t >= 0) { return [255, Math.round(255 - 180 * t), Math.round(255 - 200 * t)]; }
    return [Math.round(255 + 200 * t), Math.round(255 + 130 * t), 255];
  }
  function fmt(v) {
    if (v === null || v === undefined) { return "—"; }
    var a = Math.abs(v);
    return (a !== 0 && (a < 1e-3 || a >= 1e4)) ? v.toExponential(3) : v.toFixed(4);
  }

  /* ------------------------------------------------------------------ attention */
  function setupAttention(A) {
    var layerSel = document.getElementById("layer-select");
    var headSel = document.getElementById("head-select");
    var table = document.getElementById("attn-table");
    var info = document.getElementById("attn-info");
    var hover = document.getElementById("attn-hover");
    var thumbs = document.getElementById("attn-thumbs");
    A.layers.forEach(function (L, i) {
      layerSel.appendChild(el("option", {value: String(i)},
        "layer " + L.index + " · " + L.name + (L.cross ? " (cross 交叉注意力)" : "")));
    });
    function layer() { return A.layers[Number(layerSel.value)]; }
    function fillHeads() {
      var L = layer(), keep = Number(headSel.value) || 0;
      headSel.textContent = "";
      L.heads.forEach(function (h, j) { headSel.appendChild(el("option", {value: String(j)}, "head " + h)); });
      headSel.value = String(Math.min(keep, L.heads.length - 1));
    }
    function drawThumbs() {
      var L = layer();
      thumbs.textContent = "";
      L.heads.forEach(function (h, j) {
        var w = L.weights[j], t = w.length, s = w[0].length, px = Math.max(2, Math.floor(90 / Math.max(t, s)));
        var c = el("canvas", {width: String(s * px), height: String(t * px)});
        var ctx = c.getContext("2d"), vmax = 0;
        w.forEach(function (row) { row.forEach(function (v) { vmax = Math.max(vmax, v); }); });
        w.forEach(function (row, qi) {
          row.forEach(function (v, ki) { ctx.fillStyle = blues(v, vmax); ctx.fillRect(ki * px, qi * px, px, px); });
        });
        var box = el("div", {"class": "thumb" + (j === Number(headSel.value) ? " active" : ""),
                             "data-head": String(j)});
        box.appendChild(c);
        box.appendChild(el("div", {}, "head " + h + " · 熵 " + L.entropy[j].toFixed(2)));
        box.addEventListener("click", function () { headSel.value = String(j); draw(); });
        thumbs.appendChild(box);
      });
    }
    function draw() {
      var L = layer(), j = Number(headSel.value), w = L.weights[j];
      var t = w.length, s = w[0].length, vmax = 0;
      w.forEach(function (row) { row.forEach(function (v) { vmax = Math.max(vmax, v); }); });
      table.textContent = "";
      table.className = "heat" + (Math.max(t, s) > 24 ? " dense" : "");
      var head = el("tr");
      head.appendChild(el("th", {}, "q \\ k"));
      L.k_tokens.forEach(function (tok) { head.appendChild(el("th", {}, tok)); });
      table.appendChild(head);
      w.forEach(function (row, qi) {
        var tr = el("tr");
        tr.appendChild(el("th", {}, L.q_tokens[qi]));
        row.forEach(function (v, ki) {
          var td = el("td", {"class": "w", "data-q": String(qi), "data-k": String(ki), "data-v": String(v),
                             title: L.q_tokens[qi] + " → " + L.k_tokens[ki] + ": " + v.toFixed(6)},
                      v.toFixed(A.digits));
          td.style.background = blues(v, vmax);
          td.style.color = v / (vmax || 1) > 0.55 ? "white" : "#1a202c";
          tr.appendChild(td);
        });
        table.appendChild(tr);
      });
      info.textContent = "entropy 熵 " + L.entropy[j].toFixed(3) + " nats (max log S = " + Math.log(s).toFixed(3) +
        ") · T=" + t + ", S=" + s;
      Array.prototype.forEach.call(thumbs.children, function (b) {
        b.className = "thumb" + (Number(b.getAttribute("data-head")) === j ? " active" : "");
      });
    }
    table.addEventListener("mouseover", function (ev) {
      var td = ev.target.closest ? ev.target.closest("td.w") : null;
      if (!td) { return; }
      var L = layer(), qi = Number(td.getAttribute("data-q")), ki = Number(td.getAttribute("data-k"));
      hover.textContent = "head " + L.heads[Number(headSel.value)] + " · 查询 query " + qi + " 「" + L.q_tokens[qi] +
        "」 → 键 key " + ki + " 「" + L.k_tokens[ki] + "」 : " + Number(td.getAttribute("data-v")).toFixed(6);
      Array.prototype.forEach.call(table.querySelectorAll("td.sel"), function (c) { c.classList.remove("sel"); });
      td.classList.add("sel");
    });
    layerSel.addEventListener("change", function () { fillHeads(); drawThumbs(); draw(); });
    headSel.addEventListener("change", draw);
    layerSel.value = "0";
    fillHeads();
    drawThumbs();
    draw();
  }

  /* ------------------------------------------------------------------ positional encodings */
  function heatmap(panel, readout) {
    var img = panel.image, rows = img.length, cols = img[0].length;
    var px = Math.max(1, Math.floor(480 / Math.max(rows, cols)));
    var c = el("canvas", {width: String(cols * px), height: String(rows * px)});
    var ctx = c.getContext("2d"), lim = 0, neg = false;
    img.forEach(function (r) {
      r.forEach(function (v) {
        if (v !== null) { lim = Math.max(lim, Math.abs(v)); neg = neg || v < 0; }
      });
    });
    var data = ctx.createImageData(cols * px, rows * px);
    for (var i = 0; i < rows; i++) {
      for (var j = 0; j < cols; j++) {
        var v = img[i][j], rgb;
        if (v === null) { rgb = [221, 221, 221]; }
        else if (neg) { rgb = diverging(v, lim); }
        else { var b = blues(v, lim).match(/\d+/g); rgb = [Number(b[0]), Number(b[1]), Number(b[2])]; }
        for (var a = 0; a < px; a++) {
          for (var d = 0; d < px; d++) {
            var o = ((i * px + a) * cols * px + j * px + d) * 4;
            data.data[o] = rgb[0]; data.data[o + 1] = rgb[1]; data.data[o + 2] = rgb[2]; data.data[o + 3] = 255;
          }
        }
      }
    }
    ctx.putImageData(data, 0, 0);
    if (panel.hline !== null) {
      ctx.strokeStyle = "black"; ctx.setLineDash([4, 3]); ctx.beginPath();
      ctx.moveTo(0, (panel.hline + 0.5) * px); ctx.lineTo(cols * px, (panel.hline + 0.5) * px); ctx.stroke();
    }
    c.addEventListener("mousemove", function (ev) {
      var r = c.getBoundingClientRect();
      var j = Math.floor((ev.clientX - r.left) / r.width * cols);
      var i = Math.floor((ev.clientY - r.top) / r.height * rows);
      if (i >= 0 && i < rows && j >= 0 && j < cols) {
        readout.textContent = panel.ylabel + " = " + i + ", " + panel.xlabel + " = " + j + " : " + fmt(img[i][j]);
      }
    });
    return c;
  }

  function lineChart(panel, readout) {
    var W = 520, H = 300, L = 56, R = 12, T = 10, B = 34;
    var svg = svgEl("svg", {viewBox: "0 0 " + W + " " + H, width: String(W), height: String(H)});
    var xs = panel.x, ymin = Infinity, ymax = -Infinity;
    panel.series.forEach(function (s) {
      s.y.forEach(function (v) { if (v !== null) { ymin = Math.min(ymin, v); ymax = Math.max(ymax, v); } });
    });
    if (!isFinite(ymin)) { ymin = 0; ymax = 1; }
    if (ymax === ymin) { ymax += 1; ymin -= 1; }
    var pad = (ymax - ymin) * 0.05; ymin -= pad; ymax += pad;
    var xmin = Math.min.apply(null, xs), xmax = Math.max.apply(null, xs);
    if (xmax === xmin) { xmax += 1; }
    function X(v) { return L + (v - xmin) / (xmax - xmin) * (W - L - R); }
    function Y(v) { return T + (ymax - v) / (ymax - ymin) * (H - T - B); }
    if (panel.vline !== null) {
      svg.appendChild(svgEl("rect", {x: X(panel.vline), y: T, width: Math.max(0, X(xmax) - X(panel.vline)),
                                     height: H - T - B, fill: "#f4d6d6", opacity: "0.5"}));
      svg.appendChild(svgEl("line", {x1: X(panel.vline), x2: X(panel.vline), y1: T, y2: H - B, stroke: "black",
                                     "stroke-dasharray": "4 3"}));
    }
    svg.appendChild(svgEl("line", {x1: L, x2: W - R, y1: H - B, y2: H - B, stroke: "#555"}));
    svg.appendChild(svgEl("line", {x1: L, x2: L, y1: T, y2: H - B, stroke: "#555"}));
    var span = ymax - ymin, digits = Math.max(0, Math.min(6, 2 - Math.floor(Math.log10(span))));
    for (var k = 0; k <= 4; k++) {
      var yv = ymin + span * k / 4, xv = xmin + (xmax - xmin) * k / 4;
      if (Math.abs(yv) < span * 1e-6) { yv = 0; }
      var ty = svgEl("text", {x: L - 4, y: Y(yv) + 4, "text-anchor": "end", "font-size": "10"});
      ty.textContent = (Math.abs(yv) >= 1e5 ? yv.toExponential(1) : yv.toFixed(digits)).replace(/^-(0\.?0*)$/, "$1");
      svg.appendChild(ty);
      var tx = svgEl("text", {x: X(xv), y: H - B + 14, "text-anchor": "middle", "font-size": "10"});
      tx.textContent = String(Math.round(xv));
      svg.appendChild(tx);
    }
    var xl = svgEl("text", {x: (L + W - R) / 2, y: H - 4, "text-anchor": "middle", "font-size": "11"});
    xl.textContent = panel.xlabel;
    svg.appendChild(xl);
    panel.series.forEach(function (s, si) {
      var d = "", pen = false;
      s.y.forEach(function (v, i) {
        if (v === null) { pen = false; return; }
        d += (pen ? "L" : "M") + X(xs[i]).toFixed(1) + " " + Y(v).toFixed(1) + " ";
        pen = true;
      });
      if (d) {
        svg.appendChild(svgEl("path", {d: d, fill: "none", stroke: PALETTE[si % PALETTE.length],
                                       "stroke-width": "1.5"}));
      }
    });
    svg.addEventListener("mousemove", function (ev) {
      var r = svg.getBoundingClientRect();
      var xv = xmin + ((ev.clientX - r.left) / r.width * W - L) / (W - L - R) * (xmax - xmin);
      var best = 0;
      xs.forEach(function (v, i) { if (Math.abs(v - xv) < Math.abs(xs[best] - xv)) { best = i; } });
      readout.textContent = panel.xlabel + " = " + xs[best] + " : " + panel.series.map(function (s) {
        return s.label + " " + fmt(s.y[best]);
      }).join(" · ");
    });
    return svg;
  }

  function setupPE(list) {
    var sel = document.getElementById("pe-select"), box = document.getElementById("pe-panels");
    var note = document.getElementById("pe-note"), readout = document.getElementById("pe-readout");
    list.forEach(function (p, i) { sel.appendChild(el("option", {value: String(i)}, p.kind + " · " + p.title[1])); });
    function draw() {
      var p = list[Number(sel.value)];
      box.textContent = "";
      note.textContent = p.title[0] + " · " + p.title[1] + " — " + p.note;
      p.panels.forEach(function (panel) {
        var div = el("div", {"class": "panel"});
        div.appendChild(el("h3", {}, panel.title[1] + " · " + panel.title[0]));
        div.appendChild(panel.image ? heatmap(panel, readout) : lineChart(panel, readout));
        var legend = el("div", {"class": "legend"});
        panel.series.forEach(function (sr, si) {
          var item = el("span", {}, "━ " + sr.label);
          item.style.color = PALETTE[si % PALETTE.length];
          legend.appendChild(item);
        });
        div.appendChild(legend);
        div.appendChild(el("div", {"class": "pn"}, panel.ylabel + (panel.note ? " — " + panel.note : "")));
        box.appendChild(div);
      });
    }
    sel.addEventListener("change", draw);
    sel.value = "0";
    draw();
  }

  if (DATA.attention) { setupAttention(DATA.attention); }
  if (DATA.pe) { setupPE(DATA.pe); }
  document.body.setAttribute("data-ready", "1");
})();
"""
