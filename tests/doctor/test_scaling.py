"""The scaling probe (anatomy/doctor/probes/scaling.py) on QK-norm designs: when q and k are normalised before the
scores, a constant scale other than 1/sqrt(d_k) is a temperature the design chose (nanochat multiplies the normed q
and k by 1.2 each), named as a warning; the post's scale faults (no scale at all) stay errors, and the same gain on
un-normalised q and k stays an error."""

from __future__ import annotations

from pathlib import Path

import pytest

from anatomy.doctor import check

HERE = Path(__file__).parent
ZOO = HERE / "zoo" / "qk_temperature.py"
MODELS = HERE / "zoo_models" / "nanochat_like.py"


def scaling_findings(report):
    return [f for f in report.findings if f.probe == "scaling"]


@pytest.mark.parametrize(
    "target, kw",
    [
        (f"{ZOO}:GainAfterNorm", {"causal": True}),
        (f"{ZOO}:GainAfterNormWeights", {}),
        (f"{MODELS}:GPT", {"kind": "lm"}),
    ],
)
def test_a_temperature_on_qk_normed_scores_is_a_named_design_not_an_error(target, kw):
    report = check(target, **kw)
    assert not report.errors, [f.en for f in report.errors]
    assert report.exit_code() == 0
    found = scaling_findings(report)
    assert found and all(f.severity == "warning" for f in found)
    ev = found[0].evidence
    assert ev["qk_norm"] is True
    assert ev["times_one_over_sqrt_d_k"] == pytest.approx(1.44, rel=1e-6)
    assert "QK-norm" in found[0].en and "temperature" in found[0].en and "QK-norm" in found[0].zh


@pytest.mark.parametrize("target, kw", [(f"{ZOO}:GainWithoutNorm", {}), (f"{MODELS}:GPTGainNoNorm", {"kind": "lm"})])
def test_the_same_gain_without_a_norm_is_still_a_wrong_scale(target, kw):
    report = check(target, **kw)
    assert report.exit_code() == 1
    assert any(f.probe == "scaling" and f.severity == "error" for f in report.errors)


def test_qk_norm_does_not_excuse_a_missing_scale():
    report = check(f"{ZOO}:NormButUnscaled")
    assert "no_scaling" in report.faults
    assert report.exit_code() == 1
