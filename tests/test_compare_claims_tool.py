"""tools/compare_claims.py: a refactor's before/after runs of the claims lab, claim by claim."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

TOOL = Path(__file__).resolve().parents[1] / "tools" / "compare_claims.py"
spec = importlib.util.spec_from_file_location("compare_claims", TOOL)
compare_claims = importlib.util.module_from_spec(spec)
spec.loader.exec_module(compare_claims)


def _doc(verdict="supported", value=1.0, reason="r", extra=()):
    claims = [
        {
            "id": "C1-x",
            "verdict": verdict,
            "reason_en": reason,
            "reason_zh": "理由",
            "rule": "rule",
            "metrics": {"m": {"values": [value, float("nan")]}},
        }
    ]
    claims += [{**claims[0], "id": cid} for cid in extra]
    return {"claims": claims}


def test_equal_runs_pass_and_a_subset_is_compared_against_a_full_run(tmp_path, capsys):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(_doc(extra=("C2-y",))))
    b.write_text(json.dumps(_doc(reason="more exact")))
    assert compare_claims.main([str(a), str(b)]) == 0
    assert "1 claims: 0 verdicts, 0 metrics differ; 1 reasons, 0 rule texts differ" in capsys.readouterr().out


def test_a_changed_verdict_or_metric_fails(tmp_path, capsys):
    a, b, c = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "c.json"
    a.write_text(json.dumps(_doc()))
    b.write_text(json.dumps(_doc(verdict="nuanced")))
    c.write_text(json.dumps(_doc(value=1.0 + 1e-12)))
    assert compare_claims.main([str(a), str(b)]) == 1
    assert "VERDICT C1-x: supported -> nuanced" in capsys.readouterr().out
    assert compare_claims.main([str(a), str(c)]) == 1
    assert "METRIC C1-x.m" in capsys.readouterr().out
    assert compare_claims.main([str(a), str(tmp_path / "missing.json")]) == 2
