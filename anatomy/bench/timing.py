"""How the bench measures: interleaved rounds, their spread, the load average, peak memory from the profiler.

Contenders run in rounds, every contender once per round in a rotating order, so a noisy neighbour slows all of
them alike. ``rounds`` gives the hand-run scripts (``benchmarks/_common.py`` re-exports it) medians and the
**median of the per-round ratios** against a reference measured in the same round; ``anatomy bench`` keeps every
round (``round_times``) and prints min / median / max with the ratio of the medians (``summarize``), the per-round
ratios' spread beside it, and warns when the load average says the machine was busy (``load_warning``).

Freed memory: glibc hands large freed blocks back to the kernel, and re-touching fresh pages costs up to ~2 ms/MiB
on small VMs, which swamps kernel timings. ``keep_freed_memory_mapped()`` asks glibc (``mallopt``) to keep them,
like ``GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=68719476736`` does at start-up.

A suite's rows: ``timed_comparison`` (medians of the rounds) and ``sized_comparison`` (bytes, measured once).
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
from dataclasses import dataclass
from typing import Any

import torch

_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4  # glibc's mallopt parameters (malloc.h)


@dataclass(frozen=True)
class Options:
    """How each timing comparison is measured: interleaved ``rounds``, each the best of ``repeat`` calls."""

    rounds: int
    repeat: int


def timed(fn: Callable[[], object], repeat: int) -> float:
    """Best of ``repeat`` calls, in seconds."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def round_times(
    contenders: dict[str, Callable[[], object]], reference: str, n_rounds: int, repeat: int
) -> dict[str, list[float]]:
    """Seconds of every contender in each of ``n_rounds`` interleaved rounds (rotating order, after one warm-up
    call each): ``{name: [round 0, round 1, ...]}``."""
    if reference not in contenders:
        raise ValueError(f"reference {reference!r} is not one of the contenders {list(contenders)}")
    names = list(contenders)
    times: dict[str, list[float]] = {n: [] for n in names}
    for fn in contenders.values():  # warm-up
        fn()
    for r in range(n_rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        this = {n: timed(contenders[n], repeat) for n in order}
        for n in names:
            times[n].append(this[n])
    return times


def rounds(
    contenders: dict[str, Callable[[], object]], reference: str, n_rounds: int, repeat: int
) -> tuple[dict[str, float], dict[str, float]]:
    """Median seconds per contender and median ratio to ``reference`` over interleaved rounds (after one warm-up
    call each). Returns ``(seconds, ratios)``, two dicts keyed like ``contenders`` (the hand-run benchmarks' form;
    ``anatomy bench`` reports the spread, see ``summarize``)."""
    times = round_times(contenders, reference, n_rounds, repeat)
    ref = times[reference]
    return (
        {n: statistics.median(v) for n, v in times.items()},
        {n: statistics.median([a / b for a, b in zip(v, ref)]) for n, v in times.items()},
    )


def summarize(times: dict[str, list[float]], reference: str) -> dict[str, dict[str, float]]:
    """Per contender: ``min``, ``median``, ``max`` seconds over the rounds, ``ratio`` = its median ÷ the
    reference's median (the one convention of the report: the printed columns divide to it), and
    ``round_ratio_min/median/max``, the spread of the per-round ratios (same round, same neighbours)."""
    ref = times[reference]
    ref_median = statistics.median(ref)
    out = {}
    for name, v in times.items():
        per_round = [a / b for a, b in zip(v, ref)]
        out[name] = {
            "min": min(v),
            "median": statistics.median(v),
            "max": max(v),
            "ratio": statistics.median(v) / ref_median,
            "round_ratio_min": min(per_round),
            "round_ratio_median": statistics.median(per_round),
            "round_ratio_max": max(per_round),
        }
    return out


def load_average() -> float | None:
    """The 1-minute load average, or ``None`` where the system has none (Windows)."""
    try:
        return os.getloadavg()[0]
    except (OSError, AttributeError):
        return None


def load_warning(samples: list[float | None], cores: int, threads: int) -> str | None:
    """A warning when the load average says the machine was busy: before the bench started (``samples[0]``, others'
    work alone) above half the cores, or at any later sample above the cores (the bench's own ``threads`` count
    in it). ``None`` when quiet or unknown."""
    known = [s for s in samples if s is not None]
    if not known or cores <= 0:
        return None
    first, peak = samples[0], max(known)
    if first is not None and first > cores / 2:
        return (
            f"the machine was busy: load average {first:.2f} on {cores} cores before the bench started; "
            "timings and ratios are unreliable, rerun on a quiet machine"
        )
    if peak > cores + 0.5:
        return (
            f"the machine was busy: load average reached {peak:.2f} on {cores} cores (the bench itself uses "
            f"{threads} threads); timings and ratios are unreliable, rerun on a quiet machine"
        )
    return None


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


def timed_comparison(
    name: str,
    setup: str,
    contenders: dict[str, Any],
    opts: Options,
    *,
    work: float | None = None,
    work_unit: str | None = None,
) -> dict[str, Any]:
    """One timing comparison (unit ``"s"``): ``contenders`` timed in ``opts.rounds`` interleaved rounds against
    ``"ours"``; ``work`` per call gives each row a ``throughput`` in ``work_unit``."""
    stats = summarize(round_times(contenders, "ours", opts.rounds, opts.repeat), "ours")
    results = {}
    for k in contenders:
        row: dict[str, float] = {"value": stats[k]["median"], **stats[k]}
        if work is not None:
            row["throughput"] = work / row["value"]
        results[k] = row
    out = {"name": name, "setup": setup, "unit": "s", "reference": "ours", "results": results}
    if work_unit is not None:
        out["throughput_unit"] = work_unit
    return out


def sized_comparison(name: str, setup: str, values: dict[str, int]) -> dict[str, Any]:
    """One memory comparison (unit ``"bytes"``), measured once per contender, against ``"ours"``."""
    ref = values["ours"]
    return {
        "name": name,
        "setup": setup,
        "unit": "bytes",
        "reference": "ours",
        "results": {k: {"value": v, "ratio": v / ref if ref else None} for k, v in values.items()},
    }
