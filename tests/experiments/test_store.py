"""Resumable runs: finished units stored as they complete; a report killed with SIGKILL resumes and ends equal to
an uninterrupted one; --resume refuses, naming the difference, when the settings or the code differ."""

from __future__ import annotations

import json
import os
import shutil
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


# --- stored units are checked before they are reused (issue 31, item 1) ------------------------------------------


@pytest.fixture(scope="module")
def real_run(tmp_path_factory):
    """``(out, claims.json)`` of a real run of C4 and C5 (two experiments with a figure each) on 2 seeds."""
    out = tmp_path_factory.mktemp("real") / "run"
    return out, run_claims(["C4", "C5"], preset="smoke", seeds=2, out=out, progress=False)


def _resume(out: Path, capsys) -> tuple[int, str, dict | None]:
    code = main(
        ["claims", "run", "C4", "C5", "--preset", "smoke", "--seeds", "2", "--quiet", "--out", str(out), "--resume"]
    )
    err = capsys.readouterr().err
    doc = json.loads((out / "claims.json").read_text(encoding="utf-8")) if code == 0 else None
    return code, err, doc


def _unit(out: Path, name: str) -> dict:
    return json.loads((out / "units" / name).read_text(encoding="utf-8"))


def _write(out: Path, name: str, record, *, sign: bool = True) -> None:
    """Write a tampered unit; ``sign``: with a digest that matches its new content (as a careful forger would)."""
    if sign and isinstance(record, dict):
        record = {**record, "sha256": store.digest(record)}
    (out / "units" / name).write_text(json.dumps(record), encoding="utf-8")


DPV0, DPV1, HP0 = "dot-product-variance.seed0.json", "dot-product-variance.seed1.json", "head-parameters.seed0.json"


def _tamper_cases():
    def field(name, key, value, sign=True):
        return lambda out: _write(out, name, {**_unit(out, name), key: value}, sign=sign)

    def drop_metric(out):
        record = _unit(out, DPV1)
        record["metrics"].pop(sorted(record["metrics"])[0])
        _write(out, DPV1, record)

    def change_metric(out):  # a number edited without a new digest
        record = _unit(out, DPV1)
        key = sorted(record["metrics"])[0]
        record["metrics"][key] += 1.0
        _write(out, DPV1, record, sign=False)

    def copy(src, dst):
        return lambda out: _write(out, dst, _unit(out, src), sign=False)  # a real unit, its digest intact

    def outside(out):
        (out.parent / "outside.png").write_bytes(b"\x89PNG\r\n\x1a\n not ours")
        _write(out, DPV0, {**_unit(out, DPV0), "figures": ["../../outside.png"]})

    def delete_figure(out):
        (out / _unit(out, DPV0)["figures"][0]).unlink()

    def other_figure(out):
        (out / _unit(out, DPV0)["figures"][0]).write_bytes((out / _unit(out, HP0)["figures"][0]).read_bytes())

    def fifo(out):
        (out / "units" / DPV1).unlink()
        os.mkfifo(out / "units" / DPV1)

    def zero(out):
        (out / "units" / DPV1).unlink()
        (out / "units" / DPV1).symlink_to("/dev/zero")

    return {
        "another preset": (field(DPV1, "preset", "quick"), "made with preset 'quick', this run uses 'smoke'"),
        "another device": (field(DPV1, "device", "cuda:0"), "made with device 'cuda:0'"),
        "another code version": (field(DPV1, "code", "0123456789abcdef"), "made with code '0123456789abcdef'"),
        "another seed's unit": (copy(DPV1, DPV0), "names experiment 'dot-product-variance' seed 1, its file name"),
        "another experiment's unit": (copy(HP0, DPV0), "names experiment 'head-parameters' seed 0"),
        "metrics empty": (field(DPV1, "metrics", {}), "'metrics' must be a non-empty object"),
        "metrics a list": (field(DPV1, "metrics", [1.0, 2.0]), "'metrics' must be a non-empty object"),
        "metric a string": (field(DPV1, "metrics", {"var_ratio_dk64": "1.0"}), "is '1.0', not a number"),
        "metric missing": (drop_metric, "is missing (its experiment's claims read it)"),
        "metric edited": (change_metric, "digest does not match its content"),
        "figures a string": (field(DPV0, "figures", "figures/C5-dot-product-variance.png"), "must be a list"),
        "figure outside the folder": (outside, "'../../outside.png' is not a file figures/NAME.png"),
        "figure deleted": (delete_figure, "figure figures/C5-dot-product-variance.png is missing"),
        "figure replaced": (other_figure, "is not the one it drew"),
        "seconds a list": (field(DPV1, "seconds", [1]), "'seconds' must be a finite number"),
        "a unit that is []": (lambda out: _write(out, DPV1, []), "expected a JSON object, got list"),
        "a garbage unit": (lambda out: (out / "units" / DPV1).write_bytes(b"\xff\xfe{garbage"), "not JSON text"),
        "an old unit": (field(DPV1, "format", 1), "format 2 was expected, it has format 1"),
        "a FIFO": (fifo, "a FIFO (named pipe), not a regular file"),
        "a link to /dev/zero": (zero, "a character device, not a regular file"),
    }


@pytest.mark.parametrize("case", list(_tamper_cases()))
def test_a_unit_that_fails_its_checks_is_run_again_and_the_report_equals_a_real_run(real_run, tmp_path, capsys, case):
    out_real, real = real_run
    out = tmp_path / "run"
    shutil.copytree(out_real, out, symlinks=True)
    tamper, said = _tamper_cases()[case]
    tamper(out)
    code, err, doc = _resume(out, capsys)
    assert code == 0, err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("--resume: ") and said in lines[0], err
    assert lines[0].endswith("; running it again") and str(out / "units") in lines[0]
    assert doc is not None and _strip(doc) == _strip(real)  # as a real run, not the tampered unit's numbers
    assert doc["schedule"]["resumed_units"] == 3 and len(doc["schedule"]["recomputed"]) == 1
    again = run_claims(["C4", "C5"], preset="smoke", seeds=2, out=out, progress=False, resume=True)
    assert again["schedule"]["recomputed"] == [] and _strip(again) == _strip(real)  # the unit was replaced
    if case == "figure outside the folder":
        assert (out.parent / "outside.png").read_bytes() == b"\x89PNG\r\n\x1a\n not ours"  # never touched


def test_an_untampered_resume_reuses_every_unit_silently(real_run, tmp_path, capsys):
    out = tmp_path / "run"
    shutil.copytree(real_run[0], out)
    code, err, doc = _resume(out, capsys)
    assert code == 0 and err == "" and doc is not None
    assert doc["schedule"]["resumed_units"] == 4 and doc["schedule"]["recomputed"] == []
    assert _strip(doc) == _strip(real_run[1])


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (b"[]", "not a run record of the claims lab (expected a JSON object, got list)"),
        (b"\x89PNG\r\n\x1a\n\x00\xff", "not a run record of the claims lab (not JSON text (byte 0x89 at offset 0"),
        (b'{"preset": "smoke"', "not a run record of the claims lab (not JSON (Expecting"),
        (b'{"preset": "smoke", "seeds": 2, "claims": 3, "code": "x", "torch": "y"}', "field 'claims' should be a list"),
        (
            b'{"preset": "smoke", "seeds": true, "claims": [], "code": "x", "torch": "y"}',
            "field 'seeds' should be an integer",
        ),
        (b"[" * 100000, "not a run record of the claims lab"),
    ],
)
def test_a_run_json_that_is_not_a_run_record_is_refused_in_one_line_naming_it(
    real_run, tmp_path, capsys, content, said
):
    out = tmp_path / "run"
    shutil.copytree(real_run[0], out)
    (out / "units" / "run.json").write_bytes(content)
    before = {p.name: p.read_bytes() for p in (out / "units").iterdir()}
    code, err, _ = _resume(out, capsys)
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith(f"anatomy claims: error: {out / 'units' / 'run.json'}: ") and said in err, err
    assert "remove" in err and {p.name: p.read_bytes() for p in (out / "units").iterdir()} == before  # nothing lost
    # without --resume the same folder is not started over either: its units are kept for a resume
    assert main(["claims", "run", "C4", "C5", "--preset", "smoke", "--seeds", "2", "--quiet", "--out", str(out)]) == 2
    assert "of an unfinished run: add --resume" in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in (out / "units").iterdir()} == before


def test_a_folder_where_a_unit_belongs_is_refused_in_one_line(real_run, tmp_path, capsys):
    out = tmp_path / "run"
    shutil.copytree(real_run[0], out)
    (out / "units" / DPV1).unlink()
    (out / "units" / DPV1).mkdir()
    code, err, _ = _resume(out, capsys)
    assert code == 2 and err.count("\n") == 1
    assert f"{out / 'units' / DPV1}: a folder where a unit's file belongs" in err
    assert (out / "units" / DPV1).is_dir()
