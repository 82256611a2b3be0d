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
    per_round = [calls[3 + 6 * r: 9 + 6 * r] for r in range(3)]
    assert per_round == [["a", "a", "b", "b", "c", "c"], ["b", "b", "c", "c", "a", "a"],
                         ["c", "c", "a", "a", "b", "b"]]
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
