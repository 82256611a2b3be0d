"""Shared timing helpers for the hand-run benchmarks: the measuring code lives in the package
(``anatomy.bench.timing``, also behind ``anatomy bench``); this module re-exports it for the scripts.

Contenders are interleaved in rounds (every contender once per round, in a rotating order) and the report quotes
the median of per-round ratios against a reference measured in the same round. Run with
``GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=68719476736`` so freed memory stays mapped
(re-touching freed pages costs up to ~2 ms/MiB on these VMs and swamps kernel timings).
"""

from __future__ import annotations

import sys
from pathlib import Path

if str(Path(__file__).resolve().parents[1]) not in sys.path:  # a checkout without an install still runs
    sys.path.append(str(Path(__file__).resolve().parents[1]))

from anatomy.bench.timing import environment, peak_memory, rounds, timed  # noqa: E402, F401 - re-exported

__all__ = ["SdpaRecorder", "environment", "peak_memory", "rounds", "timed"]


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
