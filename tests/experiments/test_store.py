"""Resumable runs: finished units stored as they complete; a report killed with SIGKILL resumes and ends equal to
an uninterrupted one; --resume refuses, naming the difference, when the settings or the code differ."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from anatomy.cli.main import main
from anatomy.experiments import store
from anatomy.experiments.runner import run_claims, select
from anatomy.experiments.store import Store, atomic_write, describe_differences


def _strip(doc: dict) -> dict:
    """claims.json without what is wall-clock by declaration: timings, dates, the schedule, and the metrics (and
    verdicts read from them) that `nondeterministic` names."""
    claims = []
    for c in doc["claims"]:
        odd = set(c.get("nondeterministic", {}).get("metrics", []))
        kept = {k: v for k, v in c.items() if k != "runtime_s"}
        kept["metrics"] = {k: v for k, v in c["metrics"].items() if k not in odd}
        if odd:
            for key in ("verdict", "reason_en", "reason_zh"):
                kept.pop(key)
        claims.append(kept)
    env = {k: v for k, v in doc["environment"].items() if k != "jobs"}
    return {"preset": doc["preset"], "seeds": doc["seeds"], "environment": env, "claims": claims}


def test_a_report_killed_with_sigkill_resumes_and_ends_equal_to_an_uninterrupted_one(
    tmp_path, smoke_serial, monkeypatch
):
    _, uninterrupted = smoke_serial  # run_claims(None, preset="smoke", jobs=1): what `anatomy report` runs
    n_units = len({c["experiment"] for c in uninterrupted["claims"]})  # one seed at smoke
    out = tmp_path / "report"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    child = subprocess.Popen(
        [sys.executable, "-m", "anatomy", "report", "--preset", "smoke", "--jobs", "1", "--quiet", "--out", str(out)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    units = out / "units"
    while child.poll() is None and len(list(units.glob("*.seed0.json"))) < 4:
        time.sleep(0.05)
    child.send_signal(signal.SIGKILL)
    child.wait()
    assert child.returncode == -signal.SIGKILL, child.stderr.read() if child.stderr else ""
    kept = sorted(p.name for p in units.glob("*.seed0.json"))
    assert 4 <= len(kept) < n_units and not (out / "claims.json").exists()
    for name in kept:  # whole files: a write cut by SIGKILL leaves at most a hidden .tmp file, never read
        json.loads((units / name).read_text(encoding="utf-8"))

    seen: list[str] = []
    original = Store.put

    def spy(self, unit, result):
        seen.append(unit[0])
        original(self, unit, result)

    monkeypatch.setattr(Store, "put", spy)
    assert main(["report", "--preset", "smoke", "--jobs", "1", "--quiet", "--out", str(out), "--resume"]) == 0
    assert len(seen) == n_units - len(kept) and not set(seen) & {n.split(".seed")[0] for n in kept}
    resumed = json.loads((out / "claims.json").read_text(encoding="utf-8"))
    assert resumed["schedule"]["resumed_units"] == len(kept)
    assert _strip(resumed) == _strip(uninterrupted)
    assert [c["id"] for c in resumed["claims"]] == select(None)


def test_a_finished_unit_is_written_as_it_completes_and_a_resume_of_a_whole_run_runs_nothing(tmp_path):
    doc = run_claims(["C4", "C5"], preset="smoke", seeds=2, out=tmp_path, progress=False)
    names = sorted(p.name for p in (tmp_path / "units").iterdir())
    assert names == [
        "dot-product-variance.seed0.json",
        "dot-product-variance.seed1.json",
        "head-parameters.seed0.json",
        "head-parameters.seed1.json",
        "run.json",
    ]
    unit = json.loads((tmp_path / "units" / "dot-product-variance.seed1.json").read_text(encoding="utf-8"))
    c5 = next(c for c in doc["claims"] if c["id"].startswith("C5"))
    name = next(iter(c5["metrics"]))
    assert c5["metrics"][name]["values"][1] == unit["metrics"][name]  # the stored number, exactly
    again = run_claims(["C4", "C5"], preset="smoke", seeds=2, out=tmp_path, progress=False, resume=True)
    assert again["schedule"]["resumed_units"] == 4 and again["schedule"]["workers"] == []
    assert _strip(again) == _strip(doc)


def test_resume_refuses_other_settings_naming_each_difference(tmp_path, monkeypatch, capsys):
    run_claims(["C4"], preset="smoke", out=tmp_path, progress=False)
    with pytest.raises(ValueError, match=r"preset 'smoke' there, 'quick' now; seeds 1 there, 3 now"):
        run_claims(["C4"], preset="quick", out=tmp_path, progress=False, resume=True)
    assert main(["claims", "run", "C4", "C5", "--preset", "smoke", "--out", str(tmp_path), "--resume"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "claims differ (now also C5)" in err
    monkeypatch.setattr(store, "code_version", lambda: "0123456789abcdef")
    with pytest.raises(ValueError, match="code version [0-9a-f]{16} there, 0123456789abcdef now"):
        run_claims(["C4"], preset="smoke", out=tmp_path, progress=False, resume=True)
    assert (tmp_path / "units" / "head-parameters.seed0.json").is_file()  # a refusal loses nothing
    with pytest.raises(ValueError, match="holds no units/run.json"):
        run_claims(["C4"], preset="smoke", out=tmp_path / "empty", progress=False, resume=True)


def test_resume_refuses_a_run_stored_on_another_device(tmp_path, capsys):
    run_claims(["C4"], preset="smoke", out=tmp_path, progress=False)
    run = tmp_path / "units" / "run.json"
    stored = json.loads(run.read_text(encoding="utf-8"))
    assert stored["device"] == "cpu"
    atomic_write(run, json.dumps({**stored, "device": "cuda:0"}).encode())  # as a run on a GPU left it
    assert main(["claims", "run", "C4", "--preset", "smoke", "--out", str(tmp_path), "--resume"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "other settings (--device 'cuda:0' there, 'cpu' now)" in err
    assert (tmp_path / "units" / "head-parameters.seed0.json").is_file()  # a refusal loses nothing
    del stored["device"]  # a run stored before --device existed ran on the CPU
    assert describe_differences(stored, {**stored, "device": "cpu"}) == []
    assert describe_differences(stored, {**stored, "device": "cuda"}) == ["--device 'cpu' there, 'cuda' now"]


def test_differences_are_named_in_words():
    a = {"preset": "quick", "seeds": 3, "claims": ["C1-x", "C2-y"], "code": "aa", "torch": "2.1"}
    assert describe_differences(a, dict(a)) == []
    b = {**a, "claims": ["C2-y", "C3-z"], "torch": "2.2"}
    assert describe_differences(a, b) == ["torch '2.1' there, '2.2' now", "claims differ (now also C3; not now C1)"]


def test_an_atomic_write_replaces_whole_or_not_at_all(tmp_path, monkeypatch):
    path = tmp_path / "u.json"
    atomic_write(path, b"old")

    def broken(*_a):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken)
    with pytest.raises(OSError, match="disk full"):
        atomic_write(path, b"new")
    assert path.read_bytes() == b"old" and [p.name for p in tmp_path.iterdir()] == ["u.json"]


def test_the_code_version_follows_the_source():
    version = store.code_version()
    assert len(version) == 16 and version == store.code_version()
    assert int(version, 16) >= 0


def test_a_fresh_run_keeps_the_units_of_an_unfinished_run_and_starts_over_after_a_finished_one(tmp_path, capsys):
    run_claims(["C4"], preset="smoke", out=tmp_path, progress=False)
    assert json.loads((tmp_path / "units" / "run.json").read_text(encoding="utf-8"))["finished"] is True
    again = run_claims(["C4"], preset="smoke", out=tmp_path, progress=False)  # finished: starts over
    assert "resumed_units" not in again["schedule"] and len(again["schedule"]["workers"]) == 1
    unfinished = json.loads((tmp_path / "units" / "run.json").read_text(encoding="utf-8"))
    del unfinished["finished"]  # as if killed before the report
    (tmp_path / "units" / "run.json").write_text(json.dumps(unfinished), encoding="utf-8")
    assert main(["claims", "run", "C4", "--preset", "smoke", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "holds 1 finished unit of an unfinished run: add --resume" in err
    assert (tmp_path / "units" / "head-parameters.seed0.json").is_file()
