"""The runner: runs planned once per experiment and seed, spread over worker processes, with the same numbers as
a serial run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from anatomy.cli.main import main
from anatomy.experiments import runner
from anatomy.experiments.registry import CLAIMS, EXPERIMENTS
from anatomy.experiments.runner import NONDETERMINISTIC, plan, run_claims, select


def _groups(ids):
    groups: dict[str, list[str]] = {}
    for cid in select(ids):
        groups.setdefault(CLAIMS[cid].experiment, []).append(cid)
    return groups


def test_parallel_and_serial_claims_json_agree_on_every_verdict_and_deterministic_metric(tmp_path, smoke_serial):
    serial_out, serial = smoke_serial  # run_claims(None, preset="smoke", jobs=1) (conftest.py)
    parallel = run_claims(None, preset="smoke", out=tmp_path / "parallel", progress=False, jobs=2)
    assert parallel["environment"]["jobs"] == 2 and serial["environment"]["jobs"] == 1
    stored = json.loads((tmp_path / "parallel" / "claims.json").read_text(encoding="utf-8"))
    assert [c["id"] for c in stored["claims"]] == [c["id"] for c in serial["claims"]] == select(None)
    compared = 0
    for s, p in zip(serial["claims"], stored["claims"]):
        odd = set(s.get("nondeterministic", {}).get("metrics", []))
        assert odd == set(p.get("nondeterministic", {}).get("metrics", []))
        assert s["metrics"].keys() == p["metrics"].keys()
        for name in s["metrics"]:
            if name not in odd:
                assert s["metrics"][name]["values"] == p["metrics"][name]["values"], (s["id"], name)  # bit-equal
                compared += 1
        if not odd:  # a verdict read from timings may differ between any two runs, serial ones too
            assert s["verdict"] == p["verdict"], s["id"]
            assert s["reason_en"] == p["reason_en"], s["id"]
        assert s["figures"] == p["figures"]
    assert compared > 200
    timed = [c["id"] for c in serial["claims"] if c.get("nondeterministic")]
    assert timed and len(timed) < 5, timed  # said, for the few claims that time code, and only those
    for cid in timed:
        assert "wall-clock" in serial["claims"][select(None).index(cid)]["nondeterministic"]["why"]
    assert (tmp_path / "parallel" / "index.html").is_file()
    assert sorted(p.name for p in (tmp_path / "parallel" / "figures").iterdir()) == sorted(
        p.name for p in (serial_out / "figures").iterdir()
    )


def test_every_nondeterministic_pattern_names_metrics_an_experiment_records():
    select(None)
    for name, (patterns, why) in NONDETERMINISTIC.items():
        assert name in EXPERIMENTS and why
        recorded = [m for c in CLAIMS.values() if c.experiment == name for m in c.metrics]
        for pattern in patterns:
            assert runner.nondeterministic_metrics(name, recorded), (name, pattern)
    assert runner.nondeterministic_metrics("mask-fills", ["anything"]) == {}


def test_plan_has_one_run_per_experiment_and_seed_longest_first():
    groups = _groups(["C5", "C6", "C1", "C2", "C4"])  # C5, C6 share an experiment; so do C1, C2
    assert set(groups) == {"dot-product-variance", "head-count", "head-parameters"}
    tasks = plan(groups, 3)
    assert sorted(tasks) == sorted((e, s) for e in groups for s in range(3))
    assert [t[0] for t in tasks[:3]] == ["head-count"] * 3  # the longest experiment starts first
    assert tasks[-1][0] == "head-parameters"


def test_claims_sharing_an_experiment_run_it_once_per_seed(tmp_path, monkeypatch):
    calls = []
    select(None)
    exp = EXPERIMENTS["dot-product-variance"]
    original = exp.fn
    monkeypatch.setattr(exp, "fn", lambda trial: calls.append(trial.seed) or original(trial))
    doc = run_claims(["C5", "C6"], preset="smoke", seeds=2, out=tmp_path, progress=False)
    assert sorted(calls) == [0, 1]
    assert [c["metrics"]["var_ratio_dk64"]["n"] for c in doc["claims"] if "var_ratio_dk64" in c["metrics"]] == [2]


@pytest.mark.parametrize("where", ["worker", "here"])
def test_a_failing_run_in_a_worker_stops_the_run_with_its_error(tmp_path, where):
    # the first task goes to the worker process, the second to this process (which starts at once)
    tasks = [("no-such-experiment", 0), ("head-parameters", 0)]
    seen = []
    with pytest.raises(KeyError, match="no-such-experiment"):
        runner._run_pool(
            tasks if where == "worker" else tasks[::-1], "smoke", tmp_path, 2, lambda task, result: seen.append(task)
        )
    assert seen in ([], [("head-parameters", 0)])


def test_the_schedule_says_where_the_wall_time_went(tmp_path):
    timeline: list = []
    finished = []
    tasks = [("head-parameters", 0), ("mha-shapes", 0), ("layernorm-reference", 0), ("padding-pe", 0)]
    began = __import__("time").monotonic()
    runner._run_pool(tasks, "smoke", tmp_path, 2, lambda task, result: finished.append(task), timeline)
    assert sorted(finished) == sorted(tasks) and sorted(t[0] for t in timeline) == sorted(tasks)
    assert len({t[1] for t in timeline}) in (1, 2)  # this process, and the worker if it started in time
    sched = runner.schedule(timeline, began, max(t[3] for t in timeline) + 1.0)
    assert sum(w["runs"] for w in sched["workers"]) == 4
    for w in sched["workers"]:
        assert w["tail_s"] >= 1.0 and w["busy_s"] + w["idle_s"] == pytest.approx(sched["wall_s"], abs=0.02)
    assert 0 < sched["utilisation"] < 1


def test_jobs_must_be_a_positive_integer(tmp_path, capsys):
    with pytest.raises(ValueError, match="jobs must be a positive integer"):
        run_claims(["C4"], preset="smoke", out=tmp_path, jobs=0)
    assert main(["claims", "run", "C4", "--preset", "smoke", "--out", str(tmp_path), "--jobs", "0"]) == 2
    assert "--jobs must be a positive integer" in capsys.readouterr().err
    assert main(["report", "--preset", "smoke", "--out", str(tmp_path), "--jobs", "-1", "--quiet"]) == 2


def test_the_cli_runs_claims_in_parallel(tmp_path, capsys):
    out = Path(tmp_path / "o")
    assert main(["claims", "run", "C4", "C11", "--preset", "smoke", "--out", str(out), "--jobs", "2", "--quiet"]) == 0
    doc = json.loads((out / "claims.json").read_text(encoding="utf-8"))
    assert doc["environment"]["jobs"] == 2 and [c["id"].split("-")[0] for c in doc["claims"]] == ["C4", "C11"]
    assert "not reproducible bit for bit" in capsys.readouterr().out  # C11 times kernels, and says so


def test_a_worker_that_dies_stops_the_run_with_one_line(tmp_path, monkeypatch, capsys):
    def dying(*_args, **_kw):
        raise runner.WorkerDied("a worker process died during head-count (seed 0)")

    monkeypatch.setattr(runner, "_run_pool", dying)
    assert (
        main(
            [
                "claims",
                "run",
                "C1",
                "C4",
                "--preset",
                "smoke",
                "--seeds",
                "2",
                "--out",
                str(tmp_path),
                "--jobs",
                "2",
                "--quiet",
            ]
        )
        == 1
    )
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "worker process died during head-count" in err
