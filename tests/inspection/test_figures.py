"""Figures are produced offline, are valid PNG/SVG with real content, and Chinese labels never become boxes."""

from __future__ import annotations

import math
import os
import warnings
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import torch

import anatomy
from anatomy.inspection import attention_weights, figures, viz, viz_masks, viz_pe

matplotlib = pytest.importorskip("matplotlib")
Image = pytest.importorskip("PIL.Image")

TEXT = "小明把球传给了小红他跑得很快"  # the post's §1.1 sentence


@pytest.fixture(scope="module")
def layer():
    torch.manual_seed(0)
    model = anatomy.build_model(anatomy.ModelConfig.from_preset("seed-block")).eval()
    tokens, ids = viz.char_tokens(TEXT, model.config.vocab_size)
    with torch.no_grad(), attention_weights(model, layers=[0]) as maps:
        model(ids)
    return tokens, maps[0]


def _png_ok(path, min_size=(400, 300)):
    with Image.open(path) as im:
        im.verify()
    with Image.open(path) as im:
        assert im.format == "PNG" and im.size[0] >= min_size[0] and im.size[1] >= min_size[1]
        gray = im.convert("L")
        inked = gray.point(lambda v: 255 if v < 200 else 0).histogram()[255] / (im.size[0] * im.size[1])
        assert inked > 0.05, f"{path} is almost blank ({inked:.1%} inked)"
        return im.size


def _glyph_warnings(record) -> list[str]:
    return [str(w.message) for w in record if "missing from font" in str(w.message)]


def _texts(fig) -> list[str]:
    from matplotlib.text import Text

    return [t.get_text() for t in fig.findobj(Text) if t.get_text()]


def test_char_tokens_say_what_they_are():
    tokens, ids = viz.char_tokens("ab小", 100)
    assert tokens == ["a", "b", "小"] and ids.tolist() == [[97, 98, ord("小") % 100]]
    assert "ord(char) mod vocab_size=100" in viz.TOKENIZER_NOTE.format(vocab=100)
    with pytest.raises(ValueError, match="--text"):
        viz.char_tokens("", 100)


def test_attention_figure_png_grid_of_heads_with_entropy(layer, tmp_path):
    tokens, weights = layer
    fig = viz.attention_figure(weights, tokens, note=viz.TOKENIZER_NOTE.format(vocab=100))
    heads = [ax for ax in fig.axes if ax.get_title().startswith("head")]
    assert len(heads) == 4 and len(fig.axes) == 5  # four heads and one colour bar
    entropy = weights.entropy(0)
    for ax, h in zip(heads, range(4)):
        assert f"entropy {entropy[h]:.2f} nats" in ax.get_title()
        labels = [t.get_text() for t in ax.get_yticklabels()]
        if figures.cjk_font():  # each branch asserted where it applies: Chinese characters, or their code points
            assert labels == tokens
        else:
            assert labels == [f"U+{ord(c):04X}" for c in tokens] and not any(figures.needs_cjk(t) for t in labels)
    size = _png_ok(figures.save_figure(fig, tmp_path / "attention.png"))
    assert size[0] > size[1]  # a row of four heads


def test_attention_figure_svg_is_self_contained(layer, tmp_path):
    tokens, weights = layer
    path = figures.save_figure(viz.attention_figure(weights, tokens), tmp_path / "attention.svg")
    root = ET.parse(path).getroot()
    assert root.tag.endswith("svg")
    svg = "{http://www.w3.org/2000/svg}"
    assert not list(root.iter(svg + "text"))  # glyphs are drawn as paths: no font needed to view it
    assert sum(1 for _ in root.iter(svg + "use")) > 100 and sum(1 for _ in root.iter(svg + "path")) > 50
    text = open(path, encoding="utf-8").read()
    assert "http://" not in text.replace("http://www.w3.org", "").replace("http://purl.org", "").replace(
        "http://creativecommons.org", ""
    ).replace("http://matplotlib.org", "")


def test_chinese_labels_have_no_missing_glyphs(layer, tmp_path):
    if figures.cjk_font() is None:
        pytest.skip("no CJK font installed (apt-get install fonts-wqy-microhei); the no-font path is tested below")
    tokens, weights = layer
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        fig = viz.attention_figure(weights, tokens)
        figures.save_figure(fig, tmp_path / "zh.png")
        figures.save_figure(
            viz_pe.positional_figure(viz_pe.positional_data("sinusoidal", max_len=32, train_len=16)),
            tmp_path / "pe.png",
        )
    assert not _glyph_warnings(record)
    assert any("熵" in t for t in _texts(fig)) and any("小" in t for t in _texts(fig))


def test_the_glyph_check_would_catch_boxes(tmp_path):
    """Sanity check of the test above: Chinese text in a Latin-only font does warn."""
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        with matplotlib.rc_context({"font.family": ["DejaVu Sans"]}):
            fig = figures.new_figure(figsize=(2, 1))
            fig.text(0.1, 0.5, "小明")
            fig.savefig(tmp_path / "boxes.png")
    assert _glyph_warnings(record)


def test_without_a_cjk_font_one_hint_and_code_points_not_boxes(layer, tmp_path, monkeypatch):
    from anatomy.inspection import figures

    for where in (viz, figures):  # the pictures read it here; the font plumbing in figures.py
        monkeypatch.setattr(where, "cjk_font", lambda: None)
    tokens, weights = layer
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        fig = viz.attention_figure(weights, tokens)
        _png_ok(figures.save_figure(fig, tmp_path / "no_cjk.png"))
    assert not _glyph_warnings(record)
    texts = _texts(fig)
    assert "U+5C0F" in texts  # 小
    hints = [t for t in texts if "fonts-wqy-microhei" in t]
    assert len(hints) == 1 and "no CJK font" in hints[0]
    assert not any(figures.needs_cjk(t) for t in texts)


def test_positional_figure_png_and_svg(tmp_path):
    fig = viz_pe.positional_figure(viz_pe.positional_data("rope", d_model=32, max_len=64, train_len=32))
    assert len([ax for ax in fig.axes if ax.get_title()]) == 4
    _png_ok(figures.save_figure(fig, tmp_path / "rope.png"), (800, 600))
    fig = viz_pe.positional_figure(viz_pe.positional_data("learned", d_model=16, max_len=40, train_len=20))
    assert ET.parse(figures.save_figure(fig, tmp_path / "learned.svg")).getroot().tag.endswith("svg")


def test_bad_positional_arguments_name_the_argument():
    with pytest.raises(ValueError, match="--kind must be one of"):
        viz_pe.positional_data("cosine")
    with pytest.raises(ValueError, match="--train-len"):
        viz_pe.positional_data("rope", max_len=32, train_len=32)
    with pytest.raises(ValueError, match="--d-model must be even"):
        viz_pe.positional_data("sinusoidal", d_model=15)


def test_masks_mark_fully_masked_rows(tmp_path):
    masks = viz_masks.mask_examples(seq=8, pad=3)
    names = list(masks)
    assert masks["causal"].equal(torch.ones(8, 8, dtype=torch.bool).tril())
    assert not masks[names[0]][:, 5:].any() and masks[names[0]][:, :5].all()
    empty = (~masks[names[3]].any(-1)).nonzero().flatten().tolist()
    assert empty == [0, 1, 2]  # left padding + causal: the pad queries see nothing
    fig = viz_masks.mask_figure(masks, viz_masks.fill_value_table())
    assert "3 fully masked row(s)" in fig.axes[3].get_title()
    assert sum("no key" in t for t in _texts(fig)) == 3
    _png_ok(figures.save_figure(fig, tmp_path / "masks.png"), (1000, 600))


def test_fill_value_table_is_computed():
    rows = {(r["fill"], r["dtype"]): r for r in viz_masks.fill_value_table()}
    assert len(rows) == 4 * 3 + 3
    for dt in ("float32", "bfloat16", "float16"):
        assert rows[("-inf", dt)]["fully masked row"] == "NaN"  # softmax of all -inf
        assert rows[("finfo.min", dt)]["fully masked row"].startswith("uniform")  # leaks to padding
        assert rows[("finfo.min", dt)]["two masks added"] == "NaN"  # finfo.min + finfo.min = -inf
        assert rows[("anatomy: bool mask", dt)]["fully masked row"] == "0 (no NaN)"
        for fill in ("-inf", "finfo.min", "-1e9", "-1e4"):
            assert rows[(fill, dt)]["hidden weight"] == "0 (exact)"
    assert rows[("-1e9", "float16")]["stored as"] == "-inf (overflow)"
    assert torch.tensor(-1e9, dtype=torch.float16).isinf()
    assert rows[("-1e9", "float16")]["scores.masked_fill"].startswith("RuntimeError")
    assert rows[("-1e4", "bfloat16")]["stored as"] == "-9984 (rounded)"
    leak32 = float(rows[("-1e4", "float32")]["hidden weight, logit 1e4"].split()[-1])
    expected = math.exp(9990 - 1e4) / (math.exp(2) + math.exp(1) + math.exp(0.5) + math.exp(-10))  # 1.5 hidden too
    assert leak32 == pytest.approx(expected, rel=0.05)
    text = viz_masks.format_table(viz_masks.fill_value_table())
    assert text.splitlines()[0].split()[:2] == ["fill", "dtype"] and "overflow" in text


# ------------------------------------------------------------------ a CJK font installed after the font cache


def _a_cjk_font_file() -> str:
    from anatomy.inspection import figures

    files = [f for f in figures._font_files_on_disk() if figures._has_han(f)]
    if not files:
        pytest.skip(
            "no CJK font file on this machine (apt-get install fonts-wqy-microhei): the code-point "
            "fallback is tested by test_without_a_cjk_font_one_hint_and_code_points_not_boxes"
        )
    return files[0]


STALE_CACHE = """
import json, glob, os, sys
from matplotlib import font_manager
from anatomy.inspection import figures
# the cache on disk now predates the font: drop every font with Chinese glyphs from it
path = glob.glob(os.path.join(os.environ["MPLCONFIGDIR"], "fontlist-*.json"))[0]
data = json.load(open(path))
data["ttflist"] = [f for f in data["ttflist"] if not figures._has_han(f["fname"])]
json.dump(data, open(path, "w"))
print(len(data["ttflist"]))
"""

USE_IT = """
import warnings
from anatomy.inspection import figures, viz, viz_masks, viz_pe
assert figures._cached_cjk_font() is None, "the cache still lists a CJK font: the test set-up failed"
name = figures.cjk_font()
with warnings.catch_warnings(record=True) as record:
    warnings.simplefilter("always")
    with figures._fonts():  # as every picture draws its text
        fig = figures.new_figure(figsize=(2, 1))
        fig.text(0.1, 0.5, "小明 " + figures.bi("weight", "权重"))
    figures.save_figure(fig, "out.png")
print(name, sum("missing from font" in str(w.message) for w in record))
"""


def test_a_cjk_font_missing_from_a_stale_matplotlib_cache_is_found_and_used(tmp_path):
    import os
    import subprocess
    import sys

    _a_cjk_font_file()
    root = str(Path(anatomy.__file__).resolve().parents[1])  # the package under test, whatever is installed
    path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "MPLCONFIGDIR": str(tmp_path / "mpl"), "PYTHONPATH": path}
    kept = subprocess.run([sys.executable, "-c", STALE_CACHE], env=env, capture_output=True, text=True, check=True)
    assert int(kept.stdout) > 0  # the Latin fonts stay cached
    run = subprocess.run([sys.executable, "-c", USE_IT], env=env, capture_output=True, text=True, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    name, missing = run.stdout.split()[:-1], int(run.stdout.split()[-1])
    assert name and name != ["None"] and missing == 0  # found past the cache, and every glyph drawn


def test_a_font_folder_is_searched_when_neither_cache_nor_fontconfig_know_the_font(tmp_path, monkeypatch):
    import shutil

    from anatomy.inspection import figures

    source = _a_cjk_font_file()
    fresh = tmp_path / "fonts"
    fresh.mkdir()
    shutil.copy(source, fresh / ("installed-later" + os.path.splitext(source)[1]))
    monkeypatch.setattr(figures, "_cached_cjk_font", lambda: None)
    monkeypatch.setattr(figures, "_FONT_DIRS", ())
    monkeypatch.setattr(shutil, "which", lambda name: None)  # no fc-list
    monkeypatch.setenv("ANATOMY_FONT_DIRS", str(fresh))
    figures._find_cjk_font.cache_clear()
    try:
        assert figures.cjk_font() is not None and figures.cjk_hint() == figures.CJK_HINT
    finally:
        figures._find_cjk_font.cache_clear()


def test_the_hint_names_a_cjk_font_file_that_cannot_be_loaded(tmp_path, monkeypatch):
    import shutil

    from anatomy.inspection import figures

    (tmp_path / "wqy-microhei.ttc").write_bytes(b"not a font")
    monkeypatch.setattr(figures, "_cached_cjk_font", lambda: None)
    monkeypatch.setattr(figures, "_FONT_DIRS", (str(tmp_path),))
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.delenv("ANATOMY_FONT_DIRS", raising=False)
    figures._find_cjk_font.cache_clear()
    try:
        assert figures.cjk_font() is None
        hint = figures.cjk_hint()
        assert "wqy-microhei.ttc" in hint and "could not be loaded" in hint and "fonts-wqy-microhei" in hint
    finally:
        figures._find_cjk_font.cache_clear()
