"""anatomy.bench.timing: interleaved rounds, silenced profiler, peak memory."""

from __future__ import annotations

import os

import pytest
import torch

from anatomy.bench.timing import peak_memory, quiet_stderr, rounds


def test_rounds_interleave_in_a_rotating_order_and_ratio_to_the_reference():
    calls: list[str] = []
    contenders = {name: (lambda name=name: calls.append(name)) for name in ("a", "b", "c")}
    seconds, ratios = rounds(contenders, "b", n_rounds=3, repeat=2)
    assert calls[:3] == ["a", "b", "c"]  # the warm-up
    per_round = [calls[3 + 6 * r : 9 + 6 * r] for r in range(3)]
    assert per_round == [["a", "a", "b", "b", "c", "c"], ["b", "b", "c", "c", "a", "a"], ["c", "c", "a", "a", "b", "b"]]
    assert ratios["b"] == 1.0 and set(seconds) == {"a", "b", "c"} and all(v > 0 for v in seconds.values())
    with pytest.raises(ValueError, match="reference 'z' is not one of the contenders"):
        rounds(contenders, "z", 1, 1)


def test_quiet_stderr_silences_file_descriptor_2_only_inside(capfd):
    with quiet_stderr():
        os.write(2, b"USDT: profiler_start\n")
    os.write(2, b"after\n")
    assert capfd.readouterr().err == "after\n"


def test_peak_memory_sees_an_allocation_and_prints_nothing(capfd):
    peak = peak_memory(lambda: torch.ones(1_000_000, dtype=torch.float32).sum())
    assert 4_000_000 <= peak < 40_000_000
    captured = capfd.readouterr()
    assert "USDT" not in captured.err + captured.out


def test_summarize_gives_min_median_max_and_the_ratio_of_medians():
    from anatomy.bench.timing import summarize

    times = {"ours": [2.0, 1.0, 3.0], "peer": [4.0, 30.0, 1.0]}  # a noisy peer: per-round ratios 2, 30, 1/3
    s = summarize(times, "ours")
    assert (s["ours"]["min"], s["ours"]["median"], s["ours"]["max"], s["ours"]["ratio"]) == (1.0, 2.0, 3.0, 1.0)
    assert (s["peer"]["min"], s["peer"]["median"], s["peer"]["max"]) == (1.0, 4.0, 30.0)
    assert s["peer"]["ratio"] == 2.0  # median 4 / median 2: what the printed columns divide to
    assert s["peer"]["round_ratio_median"] == 2.0 and s["peer"]["round_ratio_max"] == 30.0
    assert s["peer"]["round_ratio_min"] == pytest.approx(1 / 3)


def test_the_load_warning_reads_the_load_before_and_during_the_run():
    from anatomy.bench.timing import load_warning

    assert load_warning([0.3, 1.2, 1.4], cores=2, threads=1) is None  # the bench's own thread: quiet
    before = load_warning([1.5, 1.6], cores=2, threads=1)
    assert before is not None and "load average 1.50 on 2 cores before the bench started" in before
    during = load_warning([0.2, 3.1, 0.9], cores=2, threads=1)
    assert during is not None and "reached 3.10 on 2 cores" in during
    assert load_warning([None, None], cores=2, threads=1) is None  # unknown (no getloadavg): no claim
