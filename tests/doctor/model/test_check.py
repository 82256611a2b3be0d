"""The doctor on a whole model: found by behaviour, built, its blocks diagnosed and folded, and the model-level
probes, on models in several styles (tests/doctor/model/*_style.py), each correct as written."""

from __future__ import annotations

import json

import pytest

from anatomy.doctor import CheckError, check
from anatomy.doctor.model.report import ModelReport
from tests.doctor.model.styles import HERE, run, variant

STYLES = [
    ("nano_style.py", "GPT"),
    ("llama_style.py", "Transformer"),
    ("lecture_style.py", "GPTLanguageModel"),
    ("course_style.py", "GPT"),
    ("hf_style.py", "CausalLM"),  # float32 additive masks for SDPA, the loss shifted inside
    ("mingpt_style.py", "GPT"),  # get_default_config(), a block reaching its MLP through a closure
]


@pytest.mark.parametrize(("style", "cls"), STYLES)
def test_a_correct_model_gets_no_error(style, cls):
    report = check(f"{HERE / style}:{cls}")
    assert isinstance(report, ModelReport) and report.kind == "lm"
    assert report.errors == [], report.render()
    assert report.faults == set() and report.warnings == []
    assert report.layers and all(row["status"] == "checked" for row in report.layers)


def test_the_kind_is_found_by_behaviour_and_can_be_named():
    auto = check(f"{HERE / 'nano_style.py'}:GPT")
    named = check(f"{HERE / 'nano_style.py'}:GPT", kind="lm")
    assert auto.to_dict() == named.to_dict()
    assert auto.found["stack"] == {"path": "transformer.h", "count": 3, "class": "Block"}
    assert auto.found["loss"]["shift"] == 0 and auto.found["targets"] == "targets"


def test_a_block_is_still_a_block():
    from tests.doctor.model import nano_style

    rep = check(nano_style.Block(nano_style.GPTConfig(n_embd=16, n_head=4)), d_model=16, n_heads=4, causal=True)
    assert rep.kind == "block" and rep.errors == []


def test_sizes_are_the_callers(tmp_path):
    report = check(f"{HERE / 'nano_style.py'}:GPT", n_layers=6, vocab_size=31, block_size=10)
    assert len(report.layers) == 6 and report.settings["vocab_size"] == 31
    assert report.errors == []


def test_json_has_the_model_additions(tmp_path):
    d = json.loads(check(f"{HERE / 'nano_style.py'}:GPT").to_json())
    assert d["kind"] == "lm" and len(d["layers"]) == 3
    assert {"index", "path", "class", "status", "faults"} <= set(d["layers"][0])


def test_bad_sizes_are_one_line_errors():
    with pytest.raises(CheckError, match="n_layers must be a positive integer"):
        check(f"{HERE / 'nano_style.py'}:GPT", n_layers=0)
    with pytest.raises(CheckError, match="block_size must be at least 3"):
        check(f"{HERE / 'nano_style.py'}:GPT", block_size=2)


def test_a_forward_that_requires_a_start_position_gets_zero(tmp_path):
    path = variant(
        tmp_path, "llama_style.py", "def forward(self, tokens, start_pos=0):", "def forward(self, tokens, start_pos):"
    )
    report = run(path, "Transformer")
    assert report.errors == [] and report.found["stack"]["count"] == 3


def test_a_finding_names_its_line(tmp_path):
    path = variant(
        tmp_path, "nano_style.py", "x = self.transformer.drop(tok_emb + pos_emb)", "x = self.transformer.drop(tok_emb)"
    )
    (f,) = run(path).errors
    assert f.lineno == 93 and f.line == "tok_emb = self.transformer.wte(idx)"


def test_the_notebook_api_takes_a_model_class():
    import anatomy
    from tests.doctor.model import nano_style

    result = anatomy.check(nano_style.GPT, kind="lm", isolate=False)
    assert str(result).startswith("✓ PASS")


def test_the_last_position_only_without_targets(tmp_path):
    """karpathy/nanoGPT model.py (3adf61e): forward(idx) without targets runs the head on the last position only
    (an inference shortcut); every position's logits come with targets."""
    path = variant(
        tmp_path,
        "nano_style.py",
        "        logits = self.lm_head(x)\n",
        "        logits = self.lm_head(x) if targets is not None else self.lm_head(x[:, [-1], :])\n",
    )
    report = run(path)
    assert report.errors == [] and report.warnings == []
    assert "last position's logits only" in report.found["call_notes"][0]["en"]


def test_a_layer_whose_weights_were_not_mapped_is_not_called_ok():
    zoo = HERE.parent / "zoo_models" / "palm_lucidrains.py"
    report = check(f"{zoo}:tiny_palm", factory="tiny_palm")
    assert report.errors == [] and {row["diagnosis"] for row in report.layers} == {"unavailable"}
    text = report.render(width=200)
    assert "not compared with the reference" in text and ": ok" not in text
    assert "未与参考实现比较" in report.render(lang="zh", width=200)
    mapped = check(f"{HERE / 'nano_style.py'}:GPT").render(width=200)
    assert "0 Block: ok" in mapped and "not compared" not in mapped
