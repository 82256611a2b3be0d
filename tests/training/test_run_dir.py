"""One writer per run (the lock), kills at exact instants (the ``ANATOMY_FAULT`` hooks) during pruning and after a
branch, and the folders `anatomy train` may write into."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
import torch

from anatomy.training import checkpoint as ckpt
from anatomy.training import loop, resuming
from anatomy.training import run_dir as rd
from anatomy.training.options import parse_words, resolve

from .helpers import ANATOMY, env, lm_words, losses


def _train(words: list[str], out: Path, *extra: str, fault: str | None = None, check: bool = True):
    environment = {**env(), **({"ANATOMY_FAULT": fault} if fault else {})}
    done = subprocess.run(
        [*ANATOMY, "train", *words, *extra, "--out", str(out)] if out else [*ANATOMY, "train", *words, *extra],
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if check:
        assert done.returncode == 0, done.stderr[-2000:]
    return done


def _resume(path: Path, *words: str, fault: str | None = None) -> subprocess.CompletedProcess:
    environment = {**env(), **({"ANATOMY_FAULT": fault} if fault else {})}
    return subprocess.run(
        [*ANATOMY, "train", "--resume", str(path), *words], env=environment, capture_output=True, text=True, timeout=300
    )


@pytest.fixture(autouse=True)
def one_thread():
    """In-process runs on one thread, as the subprocesses (OMP_NUM_THREADS=1): their losses agree bit for bit."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _train_here(words: list[str], out: Path) -> None:
    options, model = resolve(None, parse_words(words))
    loop.train(options, model, out, log=lambda m: None)


def _resume_here(path: Path, *words: str) -> list[str]:
    said: list[str] = []
    loop.resume(path, parse_words(list(words)), log=said.append)
    return said


def _weights(path: Path) -> dict[str, torch.Tensor]:
    return ckpt.load_model(path)[0].state_dict()


def _every_step_dir_complete(run: Path) -> None:
    for d in (run / "checkpoints").iterdir():
        if d.name.startswith("step-"):
            assert not ckpt.missing_files(d), (d, ckpt.missing_files(d))


# ------------------------------------------------------------------------------------------------------ the lock
def test_a_live_lock_refuses_naming_the_owner_and_a_stale_one_is_said_and_taken(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        (run / rd.LOCK).write_text(json.dumps({"pid": sleeper.pid, "host": socket.gethostname(), "since": 0}))
        with pytest.raises(rd.RunLockedError, match=f"pid {sleeper.pid} on "):
            rd.RunLock(run).acquire()
    finally:
        sleeper.kill()
        sleeper.wait()
    said = []
    with rd.RunLock(run, said.append):  # the sleeper is gone: its lock is stale
        assert json.loads((run / rd.LOCK).read_text())["pid"] == os.getpid()
    assert said and f"stale lock left by pid {sleeper.pid}" in said[0]
    assert not (run / rd.LOCK).exists()  # released
    (run / rd.LOCK).write_text(json.dumps({"pid": 1, "host": "elsewhere", "since": 0}))
    with pytest.raises(rd.RunLockedError, match="pid 1 on 'elsewhere'.*another host: if it is gone, delete"):
        rd.RunLock(run).acquire()


def test_two_concurrent_trains_on_one_folder_the_second_exits_2_naming_the_first(tmp_path):
    words = lm_words(tmp_path, "steps=12", "save_every=4", "log_every=1", "eval_every=100")
    _train_here(words, tmp_path / "solo")
    run = tmp_path / "run"
    first = subprocess.Popen(
        [*ANATOMY, "train", *words, "--out", str(run)],
        env=env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while rd.holder(run) is None and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    first.send_signal(signal.SIGSTOP)  # hold the first writer mid-run, whatever the machine's speed
    try:
        assert json.loads((run / rd.LOCK).read_text())["pid"] == first.pid
        second = subprocess.run(
            [*ANATOMY, "train", *lm_words(tmp_path, "steps=12", "seed=7"), "--out", str(run)],
            env=env(),
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert second.returncode == 2, second.stderr
        assert f"being written by another process: pid {first.pid} on " in second.stderr.splitlines()[-1]
        with pytest.raises(rd.RunLockedError, match=f"pid {first.pid} on "):  # nor may a resume write there
            loop.resume(run, log=lambda m: None)
    finally:
        first.send_signal(signal.SIGCONT)
    assert first.wait(timeout=300) == 0, first.stderr.read()[-2000:]
    assert losses(run) == losses(tmp_path / "solo")  # untouched by the second: bit for bit a solo run
    a, b = _weights(run), _weights(tmp_path / "solo")
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not (run / rd.LOCK).exists()


# ---------------------------------------------------------------------------------------- kills at exact points
def test_sigkill_during_pruning_leaves_every_step_dir_complete_and_resume_is_exact(tmp_path):
    words = lm_words(tmp_path, "steps=8", "save_every=2", "keep_last=1", "log_every=1", "eval_every=100")
    _train_here(words, tmp_path / "solo")
    run = tmp_path / "run"
    killed = _train(words, run, fault="prune", check=False)  # killed deleting step-000002 while saving step 4
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    names = sorted(p.name for p in (run / "checkpoints").iterdir())
    assert "step-000002" not in names and "step-000004" in names
    assert any(n.startswith(".trash-step-000002-") for n in names), names  # the half-deleted one, not a step-*
    _every_step_dir_complete(run)
    ckpt.load_model(run)
    said = _resume_here(run)
    assert any("removing a stale lock left by pid" in m for m in said), said
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["latest.json", "step-000008"]
    assert losses(run) == losses(tmp_path / "solo")


def test_branch_then_crash_then_resume_continues_the_chosen_branch(tmp_path):
    words = lm_words(tmp_path, "steps=10", "save_every=5", "keep_last=5", "log_every=1", "eval_every=100")
    run, reference = tmp_path / "run", tmp_path / "reference"
    _train_here(words, run)
    shutil.copytree(run, reference)
    _resume_here(reference / "checkpoints" / "step-000005", "steps=16")  # the branch, never interrupted

    crashed = _resume(run / "checkpoints" / "step-000005", "steps=16", fault="after-step-7")
    assert crashed.returncode == -signal.SIGKILL
    pointer = json.loads((run / "checkpoints" / "latest.json").read_text())
    assert pointer == {"checkpoint": "step-000005", "changes": {"steps": 16}}
    assert not (run / "summary.json").exists()  # the old branch's summary (steps 10) no longer holds
    said = _resume_here(run)
    assert any("resuming" in m and "step-000005' at step 5" in m for m in said), said
    summary = json.loads((run / "summary.json").read_text())
    steps = [s for s, _ in losses(run)]
    assert summary["steps"] == 16 and steps == list(range(1, 17))  # metrics.jsonl agrees with summary.json
    assert losses(run) == losses(reference)
    a, b = _weights(run), _weights(reference)
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_loaders_and_resume_skip_and_name_an_incomplete_step_dir(tmp_path):
    options, model = resolve(
        None, parse_words(lm_words(tmp_path, "steps=6", "save_every=2", "keep_last=3", "eval_every=100"))
    )
    loop.train(options, model, tmp_path / "run", log=lambda m: None)
    newest = tmp_path / "run" / "checkpoints" / "step-000006"
    (newest / ckpt.OPTIMIZER).unlink()  # as a tool that deletes file by file would leave it
    (tmp_path / "run" / "checkpoints" / "latest.json").unlink()  # a run written before the latest pointer
    said = []
    assert ckpt.resolve(tmp_path / "run", log=said.append).name == "step-000006"  # the weights are whole
    assert said == []
    result = loop.resume(tmp_path / "run", log=said.append)  # resume needs every file: it takes step 4
    assert said[0] == f"skipping {str(newest)!r}: an incomplete checkpoint (optimizer.pt missing)"
    assert any("resuming" in m and "step-000004" in m for m in said) and result.steps == 6
    for d in ckpt.step_dirs(tmp_path / "run"):  # the resume saved step 6 again, whole
        assert not ckpt.missing_files(d)
    six = tmp_path / "run" / "checkpoints" / "step-000006"
    (six / ckpt.WEIGHTS).unlink()
    (tmp_path / "run" / "checkpoints" / "latest.json").unlink()
    said.clear()
    assert ckpt.resolve(tmp_path / "run", log=said.append).name == "step-000004"  # the loaders skip it too
    assert said == [f"skipping {str(six)!r}: an incomplete checkpoint (model.safetensors missing)"]


# ---------------------------------------------------------------------------------------------- small pieces
def test_write_atomic_keeps_the_old_content_and_no_temporary_file_on_failure(tmp_path, monkeypatch):
    target = tmp_path / "summary.json"
    target.write_text("old\n")

    def failing_replace(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(rd.os, "replace", failing_replace)
    with pytest.raises(OSError) as err:
        rd.write_atomic(target, "new\n")
    assert err.value.filename == str(target)
    assert target.read_text() == "old\n" and sorted(p.name for p in tmp_path.iterdir()) == ["summary.json"]


def test_convert_targets(tmp_path):
    step = tmp_path / "run" / "checkpoints" / "step-000004"
    step.mkdir(parents=True)
    (step / "trainer_state.json").write_text("{}")
    with pytest.raises(ValueError, match="is a training checkpoint or run folder"):
        rd.output_folder(step, overwrite=True)
    with pytest.raises(ValueError, match="is a training checkpoint or run folder"):
        rd.output_folder(tmp_path / "run", overwrite=True)
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "config.json").write_text("{}")
    with pytest.raises(ValueError, match="non-empty folder.*--overwrite"):
        rd.output_folder(tmp_path / "hf")
    rd.output_folder(tmp_path / "hf", overwrite=True)
    rd.output_folder(tmp_path / "new")


def test_ctrl_c_exits_130_with_one_line_and_leaves_the_run_resumable(tmp_path):
    run = tmp_path / "run"
    words = lm_words(tmp_path, "steps=100000", "save_every=5", "log_every=1", "eval_every=100000")
    proc = subprocess.Popen(
        [*ANATOMY, "train", *words, "--out", str(run)],
        env=env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while not ckpt.step_dirs(run) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=120) == 130
    err = proc.stderr.read()
    assert "Traceback" not in err and err.strip().splitlines()[-1].startswith(
        "anatomy train: interrupted; the checkpoints saved so far are complete"
    )
    assert not (run / rd.LOCK).exists()
    assert not [p for p in (run / "checkpoints").iterdir() if p.name.startswith((".tmp", ".trash", ".old"))]
    _every_step_dir_complete(run)
    resuming.load_training_state(ckpt.resolve(run, need=ckpt.COMPLETE))


@pytest.mark.parametrize("failure", [KeyboardInterrupt, lambda: RuntimeError("No space left on device (os error 28)")])
def test_a_save_that_fails_removes_its_temporary_directory(tmp_path, monkeypatch, failure):
    words = lm_words(tmp_path, "steps=4", "save_every=2", "eval_every=100")
    real_save, calls = ckpt.torch.save, []

    def failing(obj, f):
        calls.append(1)
        if len(calls) == 3:  # the second checkpoint's optimizer.pt
            raise failure()
        return real_save(obj, f)

    monkeypatch.setattr(ckpt.torch, "save", failing)
    expected = KeyboardInterrupt if failure is KeyboardInterrupt else OSError
    with pytest.raises(expected) as err:
        _train_here(words, tmp_path / "run")
    if expected is OSError:  # a library's text with an errno becomes an OSError naming the file
        assert err.value.errno == 28 and err.value.filename.endswith("optimizer.pt")
    monkeypatch.undo()
    assert sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir()) == ["latest.json", "step-000002"]
    assert not (tmp_path / "run" / rd.LOCK).exists()
    resuming.load_training_state(ckpt.resolve(tmp_path / "run", need=ckpt.COMPLETE))


def test_a_lock_file_nested_past_the_parser_is_stale_not_a_crash(tmp_path):
    (tmp_path / rd.LOCK).write_text("[" * 100_000)
    assert rd._read_lock(tmp_path / rd.LOCK) == {}
