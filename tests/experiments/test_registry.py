"""The claims lab's machinery: metrics, rules on synthetic values (both outcomes), the runner and the reports."""

from __future__ import annotations

import json

import pytest

from anatomy.experiments.registry import CLAIMS, Metric, holds_on_every_seed
from anatomy.experiments.runner import select


def test_metric_summary_and_interval():
    m = Metric("x", [1.0, 2.0, 3.0])
    assert m.mean == 2.0 and m.std == 1.0
    lo, hi = m.ci95
    assert lo == pytest.approx(2 - 4.303 / 3**0.5) and hi == pytest.approx(2 + 4.303 / 3**0.5)
    assert Metric("y", [5.0]).ci95 == (5.0, 5.0)
    assert m.to_dict()["values"] == [1.0, 2.0, 3.0]


@pytest.mark.parametrize(
    "values, verdict", [([0.5, 0.6, 0.7], "supported"), ([1.5, 1.6, 2.0], "refuted"), ([0.5, 1.5, 0.7], "inconclusive")]
)
def test_holds_on_every_seed_gives_each_outcome(values, verdict):
    rule = holds_on_every_seed("x", lambda v: v < 1, "x is {value}", "x 为 {value}")
    v = rule({"x": Metric("x", values)})
    assert v.verdict == verdict
    assert Metric("x", values).fmt() in v.reason_en and Metric("x", values).fmt() in v.reason_zh


def test_c5_rule_on_synthetic_numbers():
    select(None)
    rule = CLAIMS["C5-dot-variance"].rule

    def ms(ratio, beyond):
        out = {f"var_ratio_dk{d}": Metric("r", [ratio] * 3) for d in (16, 64, 256)}
        out["frac_beyond_8_dk64"] = Metric("f", [beyond] * 3)
        return out

    assert rule(ms(1.0, 0.3)).verdict == "supported"
    assert rule(ms(1.0, 0.01)).verdict == "nuanced"
    assert rule(ms(2.0, 0.3)).verdict == "refuted"


def test_statements_file_and_claims_match_both_ways():
    select(None)  # imports every claim module
    from anatomy.experiments.registry import STATEMENTS

    assert set(STATEMENTS) == set(CLAIMS) and len(CLAIMS) == 55
    for cid, c in CLAIMS.items():
        said = STATEMENTS[cid]
        assert (c.section, c.statement_zh, c.statement_en) == (said["section"], said["zh"], said["en"])
        assert c.section.strip() and c.statement_en.strip() and c.statement_zh.strip()


def test_claim_without_statement_and_statement_without_claim_are_refused(monkeypatch):
    from anatomy.experiments import registry

    with pytest.raises(ValueError, match="'C99-nowhere' has no entry in statements.toml"):
        registry.claim("C99-nowhere", experiment="x", metrics=("m",), rule_text="t")
    assert "C99-nowhere" not in CLAIMS
    monkeypatch.setitem(registry.STATEMENTS, "C98-orphan", {"section": "§9", "zh": "无", "en": "none"})
    with pytest.raises(ValueError, match="entries without a declared claim: C98-orphan"):
        registry.check_statements()
    monkeypatch.setitem(registry.STATEMENTS, "C97-declared", {"section": "§9", "zh": "有", "en": "some"})
    monkeypatch.delitem(registry.STATEMENTS, "C98-orphan")
    monkeypatch.setattr(registry, "CLAIMS", dict(CLAIMS))  # declare into a copy: the real registry stays as it is

    @registry.claim("C97-declared", experiment="x", metrics=["m"], rule_text="t")
    def rule(ms):
        return registry.Verdict("supported", "en", "zh")

    c = registry.CLAIMS["C97-declared"]
    assert c.rule is rule and c.metrics == ("m",)
    assert (c.section, c.statement_zh, c.statement_en) == ("§9", "有", "some")
    registry.check_statements()


def test_statements_are_package_data():
    from pathlib import Path

    import tomllib

    root = Path(__file__).parents[2]
    declared = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert declared["anatomy.experiments.claims"] == ["statements.toml"]
    assert (root / "anatomy" / "experiments" / "claims" / "statements.toml").is_file()


def test_select_accepts_ids_numbers_and_rejects_unknown():
    assert select(["C5"]) == ["C5-dot-variance"]
    assert select(["5", "C4-multihead-parameters"]) == ["C5-dot-variance", "C4-multihead-parameters"]
    with pytest.raises(ValueError, match="unknown claim 'C999'"):
        select(["C999"])


def test_every_claim_of_the_post_is_registered():
    numbers = sorted({int(c[1:].split("-")[0]) for c in select(None)})
    assert numbers == list(range(1, 56)), f"missing: {sorted(set(range(1, 56)) - set(numbers))}"


def test_smoke_run_of_all_claims_writes_verdicts_metrics_and_reports(smoke_serial):
    tmp_path, doc = smoke_serial  # run_claims(None, preset="smoke", jobs=1) into tmp_path (conftest.py)
    stored = json.loads((tmp_path / "claims.json").read_text(encoding="utf-8"))
    assert stored["preset"] == "smoke" and stored["seeds"] == 1
    assert [c["id"] for c in stored["claims"]] == [c["id"] for c in doc["claims"]]
    for c in stored["claims"]:
        assert c["verdict"] in ("supported", "refuted", "nuanced", "inconclusive")
        assert c["metrics"] and all("mean" in m and "ci95" in m for m in c["metrics"].values())
        assert set(c) >= {"id", "section", "statement_zh", "statement_en", "verdict", "metrics", "figures", "runtime_s"}
        for fig in c["figures"]:
            assert (tmp_path / fig).stat().st_size > 1000
    for name in ("report.md", "report.zh.md", "index.html"):
        text = (tmp_path / name).read_text(encoding="utf-8")
        assert all(c["id"] in text for c in stored["claims"])
    assert "成立" in (tmp_path / "report.zh.md").read_text(encoding="utf-8")


def test_non_finite_metric_values_do_not_crash_the_summary():
    m = Metric("loss", [1.0, float("nan"), 2.0])
    assert m.std != m.std and "nan" in m.fmt()
    d = m.to_dict()
    assert d["std"] == "nan" and d["values"][1] == "nan"
    assert Metric("x", [float("inf")] * 3).fmt() == "inf"


def test_runs_made_in_parallel_merge_into_one_report(tmp_path):
    from anatomy.cli.main import main

    assert main(["claims", "run", "C5", "--preset", "smoke", "--out", str(tmp_path / "a"), "--quiet"]) == 0
    assert main(["claims", "run", "C4", "--preset", "smoke", "--out", str(tmp_path / "b"), "--quiet"]) == 0
    assert main(["claims", "merge", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "m")]) == 0
    merged = json.loads((tmp_path / "m" / "claims.json").read_text(encoding="utf-8"))
    assert [c["id"] for c in merged["claims"]] == ["C4-multihead-parameters", "C5-dot-variance"]
    assert (tmp_path / "m" / "figures" / "C5-dot-product-variance.png").is_file()
    assert "C4-multihead-parameters" in (tmp_path / "m" / "report.md").read_text(encoding="utf-8")
    assert (
        main(["claims", "run", "C4", "--preset", "quick", "--seeds", "1", "--out", str(tmp_path / "q"), "--quiet"]) == 0
    )
    assert main(["claims", "merge", str(tmp_path / "a"), str(tmp_path / "q"), "--out", str(tmp_path / "x")]) == 2
