"""Layers said as spans, and block findings folded across layers."""

from __future__ import annotations

from anatomy.doctor.model.found import ModelFinding, fold, layer_words, span
from anatomy.doctor.report.findings import Finding, Report


def _report(*findings: Finding) -> Report:
    return Report("b", "block", {}, {}, list(findings), [], [], {"status": "matches"})


def test_spans():
    assert span([0, 1, 2, 5]) == "0-2, 5" and span([3]) == "3" and span([4, 2, 3]) == "2-4"
    assert layer_words([0, 1, 2], 3) == ("layers 0-2 (every layer)", "第 0-2 层（每一层）")
    assert layer_words([1], 3) == ("layer 1", "第 1 层")


def test_identical_findings_fold_and_others_stay_apart():
    leak = Finding("causal_leak", "error", "leaks", "泄漏")
    scale = Finding("scaling", "error", "no scale", "没有缩放", fault="no_scaling")
    folded = fold([_report(leak), _report(leak), None, _report(leak, scale)], 4)
    assert [(f.probe, f.layers) for f in folded] == [("causal_leak", [0, 1, 3]), ("scaling", [3])]
    assert folded[0].en == "layers 0-1, 3: leaks" and folded[1].en == "layer 3: no scale"
    assert isinstance(folded[0], ModelFinding) and folded[0].to_dict()["layers"] == [0, 1, 3]
