"""The runs the diagnosis compares (``doctor/contract/conventions.py``): a causal module that attends to a sliding
window is compared with the reference under that band."""

from __future__ import annotations

from pathlib import Path

import torch

from anatomy.doctor import check
from anatomy.doctor.contract.conventions import causal_window

ZOO = Path(__file__).parent / "zoo"


def _dep(t: int, keep) -> torch.Tensor:
    i, j = torch.arange(t)[:, None], torch.arange(t)[None, :]
    return keep(i, j).to(torch.float64) * (1.0 + 0.1 * i + 0.01 * j)


def test_a_band_of_the_last_w_tokens_is_read_as_a_sliding_window():
    assert causal_window(_dep(7, lambda i, j: (j <= i) & (j > i - 3))) == 3
    assert causal_window(_dep(7, lambda i, j: (j <= i) & (j > i - 2))) == 2
    assert causal_window(_dep(7, lambda i, j: j <= i)) is None  # the whole past: plain causal
    assert causal_window(_dep(7, lambda i, j: (j <= i + 1) & (j > i - 3))) is None  # a future token: not a window
    assert causal_window(_dep(7, lambda i, j: j == i)) is None  # itself only: no mixing to call a window
    assert causal_window(_dep(7, lambda i, j: (j <= i) & ((j > i - 3) | (j == 0)))) is None  # a sink: not a band
    holed = _dep(7, lambda i, j: (j <= i) & (j > i - 3))
    holed[5, 4] = 0.0
    assert causal_window(holed) is None  # a key inside the band that does not count
    assert causal_window(None) is None and causal_window(_dep(3, lambda i, j: j == i)) is None


def test_a_correct_sliding_window_attention_matches_and_the_window_is_said():
    report = check(str(ZOO / "sliding_window.py:SlidingWindowAttention"), causal=True)
    d = report.diagnosis
    assert d["status"] == "matches" and report.errors == [] and report.warnings == [], report.render()
    assert d["variant"]["window"] == "sliding window: each query sees itself and the 2 tokens before it"


def test_a_window_that_peeks_ahead_is_still_a_causal_leak():
    report = check(str(ZOO / "sliding_window.py:WindowPeeksAhead"), causal=True)
    assert report.errors and "window" not in report.diagnosis["variant"], report.render()
    assert any(f.probe == "causal_leak" for f in report.errors)
