"""benchmarks/against_commit.py: the ratio it prints is the median of per-round ratios, and a worker of a tree
imports that tree's anatomy (the end-to-end run is slow: the lead runs it against the commit before a change)."""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
ROOT = BENCH.parent


def _load():
    spec = importlib.util.spec_from_file_location("against_commit", BENCH / "against_commit.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_summary_is_the_median_of_per_round_ratios():
    ac = _load()
    speeds = {
        "train": {"new": [100.0, 300.0, 110.0], "old": [50.0, 100.0, 100.0], "hf": []},
        "decode": {"new": [10.0, 10.0, 10.0], "old": [10.0, 20.0, 5.0], "hf": [2.5, 1.5, 2.0]},
    }
    lines = ac.summary(speeds, "HEAD~1")
    # per round 2.0, 3.0, 1.1 -> 2.0 (the ratio of the medians would be 110 / 100 = 1.1)
    assert "new / old 2.000" in lines[0] and "(rounds 1.100-3.000)" in lines[0]
    assert "new / old 1.000" in lines[1] and "HF generate 2.00x" in lines[1]


@pytest.mark.slow
def test_a_worker_measures_its_own_tree():
    ac = _load()
    args = argparse.Namespace(threads=1, repeat=1, new=4)
    worker = ac.Worker(ROOT, "inference", args)
    try:
        assert worker.measure()["ours"] > 0
    finally:
        worker.close()
