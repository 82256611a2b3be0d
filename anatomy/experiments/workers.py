"""The local worker pool of a claims run (``--jobs N``): this process and ``N - 1`` worker processes, forked from
a fork server that imported the lab once. A worker ends with the process that started the pool, whatever killed
it (SIGKILL included): :func:`watch_parent`."""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

import torch

from anatomy.experiments.store import Result, Run, Unit
from anatomy.experiments.units import load_all, run_one


def run_timed(name: str, preset: str, seed: int, out: str, device: str = "cpu") -> tuple[Result, int, float, float]:
    """``run_one`` and where and when it ran: ``(result, worker, start, end)`` (monotonic clock, the same in
    every process of the machine)."""
    start = time.monotonic()
    result = run_one(name, preset, seed, out, device)
    return result, os.getpid(), start, time.monotonic()


_WORKER_ENV = {
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",  # one intra-op thread
    "MPLBACKEND": "Agg",
}  # figures go to PNG files: the server imports pyplot without asking for a display
_PRELOAD = [
    "anatomy.experiments.runner",
    "anatomy.experiments.workers",
    "anatomy.experiments.claims",
    "anatomy.experiments.figures",
    "matplotlib.pyplot",
    "anatomy.data",
    "anatomy.interop.torch_nn",
]


class WorkerDied(RuntimeError):
    """A worker process ended without an answer (killed, out of memory): the run stops, naming what ran."""


def run_pool(
    tasks: list[Unit],
    preset: str,
    out: Path,
    jobs: int,
    finished: Callable[[Unit, Result], None],
    timeline: list[Run] | None = None,
    device: str = "cpu",
) -> None:
    """Spread ``tasks`` over this process and ``jobs - 1`` worker processes, in the given order, each taking the
    next task when it is free. This process starts on its task at once (as a serial run would) while the workers
    start: they fork from a fresh server process that imported torch, the claims and matplotlib once
    ("forkserver": nothing of this process, its threads or locks, is inherited; "spawn" where there is no
    forkserver), so neither their start nor their first imports hold up the run. An error in a run, or a worker
    that dies (killed for memory), stops the whole run with that error (after the run under way here)."""
    context: multiprocessing.context.BaseContext
    if "forkserver" in multiprocessing.get_all_start_methods():
        server = multiprocessing.get_context("forkserver")
        server.set_forkserver_preload(_PRELOAD)
        context = server
    else:
        context = multiprocessing.get_context("spawn")
    load_all()  # this process runs experiments too
    where = str(Path(out).resolve())  # the workers' current directory is the server's, not necessarily ours
    queue = list(tasks)  # longest first: whoever is free takes the head
    helpers = min(jobs, len(queue)) - 1
    cond = threading.Condition()
    state: dict[str, Any] = {"left": len(queue), "error": None}
    in_flight: dict[Future[tuple[Result, int, float, float]], Unit] = {}

    def record(task: Unit, result: Result, worker: int, start: float, end: float) -> None:
        with cond:
            if timeline is not None:
                timeline.append((task, worker, start, end))
            finished(task, result)
            state["left"] -= 1
            cond.notify_all()

    def fail(err: BaseException) -> None:
        with cond:
            state["error"] = state["error"] or err
            cond.notify_all()

    def submit(task: Unit) -> None:
        assert pool is not None  # only the workers' tasks are submitted
        future = pool.submit(run_timed, task[0], preset, task[1], where, device)
        in_flight[future] = task
        future.add_done_callback(on_done)

    def on_done(future: Future[tuple[Result, int, float, float]]) -> None:  # in the pool's thread
        task = in_flight.pop(future)
        if future.cancelled():
            return
        try:
            result, who, t0, t1 = future.result()
        except BrokenProcessPool:
            return fail(
                WorkerDied(
                    f"a worker process died during {task[0]} (seed {task[1]}) or a run beside "
                    "it, killed from outside or for memory; try --jobs 1 or fewer jobs"
                )
            )
        except BaseException as err:  # noqa: BLE001 - the run's own error, raised again in this process
            return fail(err)
        record(task, result, who, t0, t1)
        with cond:
            if queue and state["error"] is None:
                submit(queue.pop(0))

    def start(first: list[Unit]) -> None:  # in a thread: the first submit waits for the server to import everything
        try:
            for task in first:
                submit(task)
        except BaseException as err:  # noqa: BLE001
            fail(err)

    saved = {k: os.environ.get(k) for k in _WORKER_ENV}
    os.environ.update(_WORKER_ENV)  # read by the server when it starts
    pool = (
        ProcessPoolExecutor(helpers, mp_context=context, initializer=init_worker, initargs=(os.getpid(),))
        if helpers
        else None
    )
    starter = threading.Thread(target=start, args=([queue.pop(0) for _ in range(helpers)],), daemon=True)
    try:
        starter.start()
        threads = torch.get_num_threads()
        while True:
            with cond:
                task = queue.pop(0) if queue and state["error"] is None else None
            if task is None:
                break
            result, who, t0, t1 = run_timed(task[0], preset, task[1], where, device)
            torch.set_num_threads(threads)
            record(task, result, who, t0, t1)
        with cond:
            while state["left"] and state["error"] is None:
                cond.wait()
        starter.join()
        if state["error"] is not None:
            raise state["error"]
    except BaseException:
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
            for process in list((getattr(pool, "_processes", None) or {}).values()):  # stop the runs under way
                process.terminate()
        raise
    finally:
        if pool is not None:
            pool.shutdown(wait=True)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def init_worker(parent: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the parent, which stops every worker
    watch_parent(parent)
    torch.set_num_threads(1)
    load_all()


WATCH_S = 0.25  # how often a worker looks whether the process that started it is still there
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def watch_parent(parent: int) -> None:
    """End this worker (SIGKILL) as soon as ``parent`` (the process that started the pool) is gone, however it
    ended: a worker's own parent is the fork server, so the kernel would not tell it, and a unit can run for minutes
    after a ``kill -9`` of the run, holding its memory, the fork server and the resource tracker (which end by
    themselves once every worker is gone). On Linux the kernel also kills it when the fork server goes."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        except (OSError, AttributeError):
            pass  # the watch below is enough
    born = _started(parent)
    threading.Thread(target=_watch, args=(parent, born), daemon=True, name="anatomy-parent-watch").start()


def _watch(parent: int, born: str | None) -> None:
    while _alive(parent, born):
        time.sleep(WATCH_S)
    os.kill(os.getpid(), signal.SIGKILL)


def _started(pid: int) -> str | None:
    """When ``pid`` started (Linux: its start time in clock ticks; ``None`` elsewhere), so that a pid reused by
    another process does not pass for the parent."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _alive(pid: int, born: str | None) -> bool:
    """Whether ``pid`` still runs (a zombie, killed but not yet reaped, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    except OSError:  # no /proc (not Linux): ask the kernel
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    fields = stat.rsplit(")", 1)[1].split()
    return fields[0] not in ("Z", "X") and (born is None or fields[19] == born)
