"""`anatomy viz attention|pe|mask|page` write real files offline; bad input is one line naming the argument, exit 2."""

from __future__ import annotations

import argparse
import html
import json
import re

import pytest
import torch

import anatomy
from anatomy.cli.main import main

pytest.importorskip("matplotlib")
Image = pytest.importorskip("PIL.Image")

TEXT = "小明把球传给了小红"


def _one_line_error(capsys, *words) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    for w in words:
        assert w in err[0], (w, err[0])
    return err[0]


def test_viz_attention_png_svg_html(tmp_path, capsys):
    png, svg, html = tmp_path / "a.png", tmp_path / "a.svg", tmp_path / "a.html"
    assert main(["viz", "attention", "--text", TEXT, "--heads", "0", "2", "--out", str(png)]) == 0
    out = capsys.readouterr().out
    assert f"wrote {png}" in out and re.search(r"head 0: \d\.\d{3}, head 2: \d\.\d{3}", out)
    with Image.open(png) as im:
        assert im.format == "PNG" and im.size[0] > 400
    assert (
        main(
            [
                "viz",
                "attention",
                "--text",
                "hello world",
                "--preset",
                "llama",
                "n_layers=3",
                "d_model=72",
                "d_ff=64",
                "--layer",
                "2",
                "--heads",
                "8",
                "--out",
                str(svg),
            ]
        )
        == 0
    )  # 9 heads, 3 kv heads
    assert svg.read_text(encoding="utf-8").lstrip().startswith(("<?xml", "<svg"))
    assert main(["viz", "attention", "--text", TEXT, "--out", str(html)]) == 0
    page = html.read_text(encoding="utf-8")
    data = json.loads(re.search(r'id="anatomy-data">(.*?)</script>', page, re.S).group(1))
    assert data["attention"]["layers"][0]["q_tokens"] == list(TEXT) and len(data["attention"]["layers"]) == 1


def test_viz_overrides_are_typed_by_the_config_fields():
    from anatomy.cli import viz

    ns = argparse.Namespace(
        checkpoint=None,
        preset="gpt2",
        text="abc",
        overrides=[
            "n_layers=1",
            "d_model=32",
            "n_heads=2",
            "bias=false",
            "dropout=0",
            "sliding_window=none",
            "positional=rope",
        ],
    )
    model, config, *_ = viz._load(ns)
    assert (config.n_layers, config.d_model, config.bias, config.dropout, config.positional) == (
        1,
        32,
        False,
        0.0,
        "rope",
    )
    assert type(config.dropout) is float and config.vocab_size == 1000  # a big preset's vocab is shrunk


def test_viz_bad_override_value_names_the_field(tmp_path, capsys):
    assert main(["viz", "attention", "--text", "abc", "n_layers=two", "--out", str(tmp_path / "a.png")]) == 2
    _one_line_error(capsys, "n_layers must be an integer, got 'two'")
    assert main(["viz", "attention", "--text", "abc", "layers=2", "--out", str(tmp_path / "a.png")]) == 2
    _one_line_error(capsys, "unknown key 'layers'", "n_layers")


def test_viz_attention_seq2seq_cross_attention_layer(tmp_path, capsys):
    out = tmp_path / "cross.png"
    # two encoder layers, then decoder block 0's self-attention (2) and cross-attention (3)
    assert (
        main(
            [
                "viz",
                "attention",
                "--text",
                "abc",
                "--preset",
                "t5",
                "n_layers=2",
                "d_model=32",
                "d_ff=64",
                "--layer",
                "3",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    assert out.stat().st_size > 10_000
    assert "entropy" in capsys.readouterr().out


def test_viz_pe_every_kind_and_html(tmp_path, capsys):
    for kind in ("sinusoidal", "alibi"):  # every kind is drawn in tests/inspection/test_figures.py
        out = tmp_path / f"{kind}.svg"
        assert (
            main(
                [
                    "viz",
                    "pe",
                    "--kind",
                    kind,
                    "--d-model",
                    "16",
                    "--max-len",
                    "32",
                    "--train-len",
                    "16",
                    "--out",
                    str(out),
                ]
            )
            == 0
        )
        assert out.stat().st_size > 20_000
    html = tmp_path / "pe.html"
    assert main(["viz", "pe", "--kind", "rope", "--out", str(html)]) == 0
    assert '"kind":"rope"' in html.read_text(encoding="utf-8")


def test_viz_mask_prints_the_table_and_draws(tmp_path, capsys):
    assert main(["viz", "mask"]) == 0
    text = capsys.readouterr().out
    assert "finfo.min" in text and "NaN" in text and "overflow" in text and "0 (no NaN)" in text
    html = tmp_path / "mask.html"  # the PNG is checked in tests/inspection/test_figures.py
    assert main(["viz", "mask", "--seq", "6", "--pad", "2", "--out", str(html)]) == 0
    page = html.read_text(encoding="utf-8")
    assert "<svg" in page and "two masks added" in page
    assert main(["viz", "mask", "--seq", "6", "--window", "2", "--out", str(html)]) == 0
    assert "sliding window 2 (causal)" in html.read_text(encoding="utf-8")
    assert main(["viz", "mask", "--window", "0"]) == 2
    assert "--window must be an integer in [1, --seq=8], got 0" in capsys.readouterr().err


def test_mask_examples_window_band_comes_from_the_library():
    from anatomy.components.masks import sliding_window_mask
    from anatomy.inspection.viz_masks import mask_examples

    masks = mask_examples(7, 2, window=3)
    assert torch.equal(masks["sliding window 3 (causal)"], sliding_window_mask(7, 7, 3))
    assert len(mask_examples(7, 2)) == 4


def test_viz_page(tmp_path, capsys):
    out = tmp_path / "page.html"
    assert main(["viz", "page", "--out", str(out)]) == 0
    page = out.read_text(encoding="utf-8")
    assert "形状追踪" in page and "(B=1, H=4, T=14, S=14)" in page  # the default text has 14 characters
    assert not re.search(r"(src|href)=[\"']?https?:", page)


def test_viz_help_lists_the_subcommands(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["viz", "--help"])
    out = capsys.readouterr().out
    assert exit_.value.code == 0 and all(w in out for w in ("attention", "pe", "mask", "page"))


@pytest.mark.parametrize(
    "argv, words",
    [
        (["attention", "--text", "abc", "--layer", "5"], ["--layer 5", "1 attention layer"]),
        (["attention", "--text", "abc", "--layer", "-1"], ["--layer -1"]),
        (["attention", "--text", "abc", "--heads", "0", "4"], ["--heads 4", "4 heads"]),
        (["attention", "--text", "x" * 65], ["--text", "max_seq_len=64"]),
        (["attention", "--text", "abc", "--preset", "nope"], ["unknown preset", "valid names"]),
        (["attention", "--text", "abc", "n_layers"], ["key=value"]),
        (["attention", "--text", "abc", "n_heads=3"], ["n_heads=3"]),
        (["pe", "--kind", "cosine"], ["--kind", "sinusoidal"]),
        (["pe", "--kind", "rope", "--train-len", "500"], ["--train-len"]),
        (["mask", "--pad", "9"], ["--pad"]),
        ([], ["attention|pe|mask|page"]),
    ],
)
def test_bad_input_is_one_line_exit_2(argv, words, tmp_path, capsys):
    out = ["--out", str(tmp_path / "x.png")] if argv and argv[0] in ("attention", "pe") else []
    assert main(["viz", *argv, *out]) == 2
    _one_line_error(capsys, *words)


def test_unwritable_or_wrong_output_path(tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    for out, word in (
        (tmp_path / "missing" / "x.png", "does not exist"),
        (blocker / "x.png", "does not exist"),
        (tmp_path, "is a directory"),
        (tmp_path / "x.txt", "must end in"),
    ):
        assert main(["viz", "attention", "--text", "abc", "--out", str(out)]) == 2
        _one_line_error(capsys, "--out", word)
    assert main(["viz", "page", "--out", str(tmp_path / "page.png")]) == 2
    _one_line_error(capsys, "--out", ".html")


def test_checkpoint_saved_by_save_pretrained(tmp_path, capsys):
    if not hasattr(anatomy, "load_pretrained") or not hasattr(anatomy, "save_pretrained"):
        pytest.skip("anatomy.save_pretrained / load_pretrained are not part of this build yet")
    torch.manual_seed(2)
    model = anatomy.build_model(anatomy.ModelConfig.from_preset("seed-block", n_layers=2)).eval()
    anatomy.save_pretrained(model, tmp_path / "ckpt")
    out = tmp_path / "ckpt.html"
    assert (
        main(
            [
                "viz",
                "attention",
                "--text",
                "小明把球",
                "--checkpoint",
                str(tmp_path / "ckpt"),
                "--layer",
                "1",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    page = out.read_text(encoding="utf-8")
    data = json.loads(re.search(r'id="anatomy-data">(.*?)</script>', page, re.S).group(1))
    ids = torch.tensor([[ord(c) % 100 for c in "小明把球"]])
    with torch.no_grad():
        expected = model(ids, output_attentions=True).attentions[1][0]
    torch.testing.assert_close(torch.tensor(data["attention"]["layers"][0]["weights"]), expected, atol=1e-6, rtol=0)


def test_viz_attention_reads_text_with_the_checkpoints_own_tokenizer(tmp_path, capsys):
    from anatomy.data.tokenizers import CharTokenizer

    tok = CharTokenizer("abcdefgh ")
    model = anatomy.build_model(
        anatomy.ModelConfig.from_preset(
            "gpt2", vocab_size=tok.vocab_size, d_model=16, n_heads=2, n_layers=1, max_seq_len=16
        )
    )
    run = tmp_path / "run" / "checkpoints" / "step-000001"  # a run directory: its latest checkpoint is used
    anatomy.save_pretrained(model, run)
    tok.save(run)
    out = tmp_path / "a.html"
    assert (
        main(["viz", "attention", "--checkpoint", str(tmp_path / "run"), "--text", "bad cafe", "--out", str(out)]) == 0
    )
    page = html.unescape(out.read_text(encoding="utf-8"))
    assert "the checkpoint's own tokenizer (CharTokenizer, 8 tokens)" in page
    assert "ord(char) mod" not in page
    capsys.readouterr()
    assert main(["viz", "attention", "--checkpoint", str(run), "--text", "bad 咖啡", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "--text:" in err and "'咖'" in err and "'啡'" in err
    assert main(["viz", "attention", "--checkpoint", str(tmp_path / "nope"), "--text", "a", "--out", str(out)]) == 2
    _one_line_error(capsys, "--checkpoint", "not a directory")
    assert main(["viz", "attention", "--checkpoint", str(tmp_path), "--text", "a", "--out", str(out)]) == 2
    _one_line_error(capsys, "--checkpoint", "holds no checkpoint")
