"""The interactive page: one self-contained HTML file, and in a real browser it shows the model's own numbers."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
import torch

import anatomy
from anatomy.inspection import page, viz, viz_pe

TEXT = "小明把球传给了小红他跑得很快"
LAYER, HEAD = 1, 2  # what the browser test selects


@pytest.fixture(scope="module")
def model_and_page(tmp_path_factory):
    torch.manual_seed(0)
    model = anatomy.build_model(anatomy.ModelConfig.from_preset("seed-block", n_layers=2)).eval()
    tokens, ids = viz.char_tokens(TEXT, model.config.vocab_size)
    html = page.model_page(
        model,
        {"input_ids": ids},
        tokens,
        title="anatomy test page",
        subtitle="seed-block, 2 layers",
        notes=["untrained"],
        pe_size={"d_model": 32, "max_len": 64, "train_len": 32},
    )
    path = page.write_page(tmp_path_factory.mktemp("page") / "page.html", html)
    return model, ids, tokens, html, path


def _data(html: str) -> dict:
    blob = re.search(r'<script type="application/json" id="anatomy-data">(.*?)</script>', html, re.S).group(1)
    return json.loads(blob.replace("<\\/", "</"))


def test_page_is_self_contained(model_and_page):
    *_, html, path = model_and_page
    assert html.startswith("<!DOCTYPE html>") and Path(path).read_text(encoding="utf-8") == html
    for pattern in (
        r"""(src|href)\s*=\s*["']?(https?:)?//""",
        r"url\(\s*['\"]?(https?:)?//",
        r"@import",
        r"<link[^>]+stylesheet",
        r"<script[^>]+src=",
    ):
        assert not re.search(pattern, html, re.I), pattern
    assert "fetch(" not in html and "XMLHttpRequest" not in html
    assert "注意力图" in html and "位置编码" in html and "形状追踪" in html  # Chinese labels


def test_page_inlines_its_css_and_js_package_data(model_and_page):
    *_, html, _ = model_and_page
    assets = Path(page.__file__).parent / "assets"
    css, js = ((assets / name).read_text(encoding="utf-8") for name in ("page.css", "page.js"))
    assert "setupAttention" in js and "table.heat" in css  # the real viewer, not an empty file
    assert f"<style>\n{css}</style>" in html and f"<script>\n{js}</script>" in html


def test_every_page_asset_is_package_data():
    import tomllib

    root = Path(page.__file__).parents[2]
    declared = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    shipped = {f"assets/{f.name}" for f in (Path(page.__file__).parent / "assets").iterdir()}
    assert shipped == {"assets/page.css", "assets/page.js"}
    assert shipped <= set(declared["anatomy.inspection"])


def test_page_carries_the_trace_and_every_layer_and_head(model_and_page):
    model, ids, tokens, html, _ = model_and_page
    data = _data(html)
    layers = data["attention"]["layers"]
    assert [L["name"] for L in layers] == ["stack.blocks.0.attn", "stack.blocks.1.attn"]
    assert all(L["heads"] == [0, 1, 2, 3] and L["q_tokens"] == tokens for L in layers)
    with torch.no_grad():
        reference = model(ids, output_attentions=True).attentions
    for i, L in enumerate(layers):
        torch.testing.assert_close(torch.tensor(L["weights"], dtype=torch.float32), reference[i][0], atol=1e-6, rtol=0)
    assert [p["kind"] for p in data["pe"]] == list(viz_pe.PE_KINDS)
    assert html.count("<tr class='kind-") == 2 * 17 + 1  # embedding + 17 rows per Post-LN layer
    assert "(B=1, H=4, T=14, S=14)" in html


def test_browser_shows_the_models_weights(model_and_page, tmp_path, browser):
    model, ids, tokens, _, path = model_and_page
    with torch.no_grad():
        expected = model(ids, output_attentions=True).attentions[LAYER][0, HEAD]  # (T, S), the math kernel
    artifacts = Path(os.environ.get("ANATOMY_ARTIFACTS") or tmp_path)
    artifacts.mkdir(parents=True, exist_ok=True)
    problems = []
    tab = browser.new_page(viewport={"width": 1280, "height": 900})
    tab.on(
        "console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type in ("error", "warning") else None
    )
    tab.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    requests = []
    tab.on("request", lambda r: requests.append(r.url))
    tab.goto(Path(path).resolve().as_uri())
    tab.wait_for_selector("body[data-ready='1']")
    tab.select_option("#layer-select", str(LAYER))
    tab.select_option("#head-select", str(HEAD))
    shown = tab.eval_on_selector_all(
        "#attn-table tr",
        "rows => rows.slice(1).map(r => Array.from(r.querySelectorAll('td.w')).map(c => c.textContent))",
    )
    header = tab.eval_on_selector_all("#attn-table tr:first-child th", "c => c.map(x => x.textContent)")
    assert header[1:] == tokens
    got = torch.tensor([[float(v) for v in row] for row in shown], dtype=torch.float64)
    assert got.shape == expected.shape
    assert all(len(v.split(".")[1]) == page.DIGITS for row in shown for v in row)
    assert float((got - expected.double()).abs().max()) <= 0.5 * 10**-page.DIGITS + 1e-7
    tab.hover("#attn-table tr:nth-child(4) td.w:nth-of-type(2)")  # query 2, key 1
    readout = tab.inner_text("#attn-hover")
    assert f"head {HEAD}" in readout and "「把」" in readout and "「明」" in readout
    assert float(readout.rsplit(":", 1)[1]) == pytest.approx(float(expected[2, 1]), abs=1.5e-6)
    assert "head 2" in tab.inner_text(".thumb.active")
    tab.select_option("#pe-select", str(viz_pe.PE_KINDS.index("rope")))
    assert tab.locator("#pe-panels .panel").count() == 4
    tab.locator("#pe-panels canvas").hover(position={"x": 2, "y": 2})
    assert "position p = 0" in tab.inner_text("#pe-readout")
    tab.hover("#attn-table tr:nth-child(4) td.w:nth-of-type(2)")
    tab.locator("#attention").screenshot(path=str(artifacts / "page-attention.png"))
    tab.screenshot(path=str(artifacts / "page-full.png"), full_page=True)
    assert not problems, problems
    assert all(u.startswith("file://") for u in requests), requests
    assert (artifacts / "page-attention.png").stat().st_size > 10_000
