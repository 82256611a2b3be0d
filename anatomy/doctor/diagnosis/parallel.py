"""The diagnosis' runs on the machine's second core: half of a list of independent computations in a forked
child, the other half here, the answers in the list's order.

A block that matches no reference runs every fault on every mapping hypothesis × reference variant (thousands of
float64 forwards of a tiny module, each single-threaded): on 2 cores the two halves take half the time. The child
is a ``fork`` of this process (the references it builds are its own copies), sends back its answers pickled
through a pipe and ends with ``os._exit``; when it fails in any way (no ``fork``, one core, an exception, a pickle
error, a crash) its half is computed here, so the answer never depends on the child. Small lists stay serial.
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")

MIN_ITEMS = 24  # fewer items than this: not worth a fork


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def split_map(fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
    """``[fn(x) for x in items]``, the second half computed in a forked child when there are two cores or more."""
    if len(items) < MIN_ITEMS or cores() < 2 or not hasattr(os, "fork"):
        return [fn(x) for x in items]
    half = len(items) // 2
    mine, theirs = items[:half], items[half:]
    read, write = os.pipe()
    try:
        pid = os.fork()
    except OSError:
        os.close(read)
        os.close(write)
        return [fn(x) for x in items]
    if pid == 0:  # the child: its half, pickled, then gone without running the parent's exit handlers
        os.close(read)
        code = 0
        try:
            data = pickle.dumps([fn(x) for x in theirs])
        except BaseException:  # noqa: BLE001 - the parent computes this half itself
            data, code = b"", 1
        try:
            with os.fdopen(write, "wb") as out:
                out.write(data)
        finally:
            os._exit(code)
    os.close(write)
    answers: list[R] | None = None
    try:
        with os.fdopen(read, "rb") as src:
            first = [fn(x) for x in mine]
            data = src.read()
        _, status = os.waitpid(pid, 0)
        pid = 0
        if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0 and data:
            answers = pickle.loads(data)
    finally:
        if pid:  # this side raised (a time limit, say) before the child was reaped: end it here
            try:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
    if answers is None or len(answers) != len(theirs):
        answers = [fn(x) for x in theirs]
    return first + answers
