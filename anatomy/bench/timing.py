"""How the bench measures: interleaved rounds, medians of per-round ratios, peak memory from the profiler.

Contenders run in rounds, every contender once per round in a rotating order, so a noisy neighbour slows all of
them alike; the report quotes the **median of the per-round ratios** against a reference measured in the same
round. ``benchmarks/_common.py`` re-exports these for the hand-run scripts.

Freed memory: glibc hands large freed blocks back to the kernel, and re-touching fresh pages costs up to ~2 ms/MiB
on small VMs, which swamps kernel timings. ``keep_freed_memory_mapped()`` asks glibc (``mallopt``) to keep them,
like ``GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=68719476736`` does at start-up.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator

import torch

_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4  # glibc's mallopt parameters (malloc.h)


def timed(fn: Callable[[], object], repeat: int) -> float:
    """Best of ``repeat`` calls, in seconds."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def rounds(contenders: dict[str, Callable[[], object]], reference: str, n_rounds: int, repeat: int):
    """Median seconds per contender and median ratio to ``reference`` over interleaved rounds (after one warm-up
    call each). Returns ``(seconds, ratios)``, two dicts keyed like ``contenders``."""
    if reference not in contenders:
        raise ValueError(f"reference {reference!r} is not one of the contenders {list(contenders)}")
    names = list(contenders)
    times: dict[str, list[float]] = {n: [] for n in names}
    ratios: dict[str, list[float]] = {n: [] for n in names}
    for fn in contenders.values():  # warm-up
        fn()
    for r in range(n_rounds):
        order = names[r % len(names):] + names[: r % len(names)]
        this = {n: timed(contenders[n], repeat) for n in order}
        for n in names:
            times[n].append(this[n])
            ratios[n].append(this[n] / this[reference])
    return ({n: statistics.median(v) for n, v in times.items()},
            {n: statistics.median(v) for n, v in ratios.items()})


@contextlib.contextmanager
def quiet_stderr() -> Iterator[None]:
    """Send file descriptor 2 to /dev/null for the block: the profiler's C++ side prints ``USDT: ...
    profiler_start/stop`` lines there that Python cannot catch."""
    sys.stderr.flush()
    try:
        saved = os.dup(2)
    except OSError:  # no fd 2 (a detached process): nothing to silence
        yield
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def peak_memory(fn: Callable[[], object]) -> int:
    """Peak bytes allocated by torch on the CPU during ``fn()``, from the profiler's allocation events (its
    start/stop chatter silenced)."""
    from torch.profiler import ProfilerActivity, profile

    with quiet_stderr(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    events = sorted((e for e in prof.events() if e.self_cpu_memory_usage), key=lambda e: e.time_range.start)
    current = peak = 0
    for e in events:
        current += e.self_cpu_memory_usage
        peak = max(peak, current)
    return peak


def keep_freed_memory_mapped() -> str:
    """Ask glibc to keep freed memory mapped (see the module docstring); returns how the allocator is set."""
    if "mmap_max=0" in os.environ.get("GLIBC_TUNABLES", ""):
        return "GLIBC_TUNABLES"
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
        ok = libc is not None and libc.mallopt(_M_MMAP_MAX, 0) == 1 and libc.mallopt(_M_TRIM_THRESHOLD, 2**31 - 1) == 1
    except (OSError, AttributeError):  # not glibc (macOS, musl): timings include page re-touching
        ok = False
    return "mallopt" if ok else "default (timings include page re-touching)"


def environment() -> str:
    tunables = os.environ.get("GLIBC_TUNABLES", "")
    note = "" if "mmap_max=0" in tunables else "  (GLIBC_TUNABLES not set: timings include page re-touching)"
    return f"torch {torch.__version__}, threads {torch.get_num_threads()}{note}"
