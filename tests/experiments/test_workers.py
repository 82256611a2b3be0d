"""The local worker pool (``--jobs N``): its processes end with the run that started them, SIGKILL included."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from anatomy.experiments import workers

ROOT = Path(__file__).resolve().parents[2]


def _living(processes: list[psutil.Process]) -> list[psutil.Process]:
    alive = []
    for p in processes:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:  # is_running() checks the pid's start time
                alive.append(p)
        except psutil.NoSuchProcess:
            pass
    return alive


def _parent(p: psutil.Process) -> int | None:
    try:
        return p.ppid()
    except psutil.Error:
        return None


def _command(p: psutil.Process) -> list[str]:
    try:
        return p.cmdline()
    except psutil.Error:
        return []


def test_a_claims_run_killed_with_sigkill_leaves_no_worker_fork_server_or_tracker_behind(tmp_path):
    # C1 at quick: head-count, three seeds of about 20 s each, so that the worker is inside a unit when it is killed
    command = [sys.executable, "-m", "anatomy", "claims", "run", "C1", "--preset", "quick", "--jobs", "2", "--quiet"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen(
        [*command, "--out", str(tmp_path / "out")],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    run = psutil.Process(child.pid)
    seen: dict[int, psutil.Process] = {}
    try:
        deadline = time.monotonic() + 240  # a generous bound on the start (imports on a loaded machine)
        while time.monotonic() < deadline and child.poll() is None:
            for p in run.children(recursive=True):
                seen.setdefault(p.pid, p)
            workers_seen = [p for p in _living(list(seen.values())) if _parent(p) not in (child.pid, 1, None)]
            if workers_seen:  # a worker forked by the fork server: it has taken its first unit
                break
            time.sleep(0.1)
        assert child.poll() is None, "the run ended before a worker started"
        time.sleep(1.0)  # into the unit
        for p in run.children(recursive=True):
            seen.setdefault(p.pid, p)
        assert len(seen) >= 3, [_command(p)[:3] for p in seen.values()]  # tracker, fork server, worker
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        deadline = time.monotonic() + 15  # the workers look every WATCH_S; a unit of C1 runs longer than this
        while _living(list(seen.values())) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = _living(list(seen.values()))
        assert not left, [_command(p)[:4] for p in left]
    finally:
        for p in _living(list(seen.values())):  # only what this test started
            p.kill()
        if child.poll() is None:
            child.kill()
            child.wait()


def test_the_parent_watch_tells_a_living_process_from_a_dead_or_reused_one():
    me = os.getpid()
    born = workers._started(me)
    assert workers._alive(me, born)
    if born is not None:  # Linux
        assert not workers._alive(me, str(int(born) + 1))  # the same pid, started at another time: another process
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    assert not workers._alive(gone.pid, None)
    zombie = subprocess.Popen([sys.executable, "-c", "pass"])
    while psutil.Process(zombie.pid).status() != psutil.STATUS_ZOMBIE:  # ended, not yet reaped
        time.sleep(0.01)
    try:
        if born is not None:
            assert not workers._alive(zombie.pid, workers._started(zombie.pid))
    finally:
        zombie.wait()
