"""Shared timing helpers for the hand-run benchmarks.

Contenders are interleaved in rounds (every contender once per round, in a rotating order) and the report quotes
the median of per-round ratios against a reference measured in the same round. Run with
``GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=68719476736`` so freed memory stays mapped
(re-touching freed pages costs up to ~2 ms/MiB on these VMs and swamps kernel timings).
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable

import torch
from torch.profiler import ProfilerActivity, profile


def timed(fn: Callable[[], object], repeat: int) -> float:
    """Best of ``repeat`` calls, in seconds."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def peak_memory(fn: Callable[[], object]) -> int:
    """Peak bytes allocated by torch on the CPU during ``fn()``, from the profiler's allocation events."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    events = sorted((e for e in prof.events() if e.self_cpu_memory_usage), key=lambda e: e.time_range.start)
    current = peak = 0
    for e in events:
        current += e.self_cpu_memory_usage
        peak = max(peak, current)
    return peak


def rounds(contenders: dict[str, Callable[[], object]], reference: str, n_rounds: int, repeat: int):
    """Median seconds per contender and median ratio to ``reference`` over interleaved rounds."""
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


def environment() -> str:
    tunables = os.environ.get("GLIBC_TUNABLES", "")
    note = "" if "mmap_max=0" in tunables else "  (GLIBC_TUNABLES not set: timings include page re-touching)"
    return f"torch {torch.__version__}, threads {torch.get_num_threads()}{note}"


class SdpaRecorder:
    """Names of the SDPA implementation ops dispatched inside the block (which backend actually ran)."""

    def __enter__(self):
        self.names: list[str] = []
        try:
            from torch.utils._python_dispatch import TorchDispatchMode
        except ImportError:  # a torch without it: dispatch stays unknown
            self._mode = None
            return self
        names = self.names

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                name = func.overloadpacket.__name__
                if name.startswith("_scaled_dot_product") and "backward" not in name and name not in names:
                    names.append(name)
                return func(*args, **(kwargs or {}))

        self._mode = Mode()
        self._mode.__enter__()
        return self

    def __exit__(self, *exc):
        if self._mode is not None:
            self._mode.__exit__(*exc)
        return False

    @property
    def backend(self) -> str:
        if self._mode is None:
            return "unknown"
        short = [n.replace("_scaled_dot_product_", "").replace("_attention", "") for n in self.names]
        return "+".join(short) or "math(decomposed)"  # the math backend is composite: no op of its own
