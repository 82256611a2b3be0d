"""benchmarks/prefill_memory.py measures, at a small size in this process: the prefill with every position's logits
allocates the (T, V) logits, the one that keeps the last position does not, and generate's prefill is the latter."""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "prefill_memory.py"


def test_keeping_the_last_position_does_not_allocate_the_full_logits():
    saved = list(sys.path)
    try:
        spec = importlib.util.spec_from_file_location("prefill_memory", SCRIPT)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        args = dict(prompt=200, vocab=5000, d_model=16, threads=1)
        got = {name: module.one(argparse.Namespace(one=name, **args)) for name in module.CONTENDERS}
    finally:
        sys.path[:] = saved
    logits = 200 * 5000 * 4
    assert got["full"]["torch"] >= logits > 5 * got["kept"]["torch"]
    assert got["generate"]["torch"] < logits / 5
    assert abs(got["full"]["sum"] - got["kept"]["sum"]) <= 1e-3 * max(1.0, abs(got["full"]["sum"]))
