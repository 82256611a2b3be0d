"""The norm-placement probe (anatomy/doctor/probes/block.py) on a norm whose output is never used: PaLM-pytorch
before 49232e1 projected q, k, v from the raw x and normalised x only afterwards. The doctor could not map those
weights and said "ok"; it now names the unused norm. The same model with the projections after the norm passes."""

from __future__ import annotations

from pathlib import Path

from anatomy.doctor import check

PALM = Path(__file__).parent / "zoo_models" / "palm_unnormed_qkv.py"
ZOO = Path(__file__).parent / "zoo"


def test_a_norm_whose_output_is_never_used_is_an_error():
    report = check(str(PALM), kind="lm", factory="tiny_palm_unnormed")
    assert report.exit_code() == 1
    found = [f for f in report.errors if f.probe == "norm_placement"]
    assert found, [f.en for f in report.errors]
    assert "never used" in found[0].en and "norm" in found[0].en
    assert any(p.endswith("norm") for p in found[0].evidence["unused_norms"])


def test_the_same_model_with_the_norm_used_has_no_error():
    report = check(str(PALM), kind="lm", factory="tiny_palm_normed")
    assert not report.errors, [f.en for f in report.errors]


def test_a_pre_norm_block_that_uses_its_norms_is_not_flagged():
    report = check(f"{ZOO / 'ours.py'}:OurPreNormBlock")
    assert not [f for f in report.findings if f.probe == "norm_placement"]
