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
