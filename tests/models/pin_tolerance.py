"""How a pinned float32 output is compared with its pin: relative to the magnitude pinned.

Another CPU (or another thread count, or ATen's kernels for another instruction set) sums a float32 matmul or a
reduction in another order. The difference is a few ulps of the LARGEST value the computation went through, whatever
the size of one element: an element of 0.15 in logits that reach 190 may move by 1e-4 while the largest moves by a
few 1e-5. So every element of a tensor is compared within ``RTOL`` times the tensor's largest finite magnitude, and a
sum within ``RTOL`` times the sum of magnitudes. A real change (1e-3 relative, say) is a hundred times over the
tolerance: ``tests/models/test_pinned_any_cpu.py`` checks that it fails.
"""

from __future__ import annotations

import math
from typing import Any

import torch

RTOL = 1e-5


def magnitude(t: torch.Tensor) -> float:
    """The largest finite absolute value of ``t`` (0.0 when there is none)."""
    finite = t[torch.isfinite(t)].double().abs()
    return finite.max().item() if finite.numel() else 0.0


def assert_close_to_magnitude(got: torch.Tensor, want: torch.Tensor, what: str = "") -> None:
    """Every element of ``got`` within ``RTOL`` times the magnitude of ``want``; NaN and inf where ``want`` has them."""
    assert got.shape == want.shape, f"{what}: shape {tuple(got.shape)} != pinned {tuple(want.shape)}"
    got, want = got.double(), want.double()
    assert torch.equal(torch.isnan(got), torch.isnan(want)), f"{what}: NaNs moved"
    inf = torch.isinf(want)
    assert torch.equal(torch.isinf(got), inf) and torch.equal(got[inf], want[inf]), f"{what}: infinities moved"
    finite = torch.isfinite(want)
    if finite.any():
        worst = (got[finite] - want[finite]).abs().max().item()
        allowed = RTOL * magnitude(want)
        assert worst <= allowed, f"{what}: off by {worst:.3g}, allowed {allowed:.3g} ({RTOL:g} x {magnitude(want):.4g})"


def assert_matches_summary(now: torch.Tensor, head_now: torch.Tensor, pin: dict[str, Any], what: str = "") -> None:
    """``now`` against a pinned summary: its shape, some leading values (``head_now``, taken from ``now`` the way
    the pin's ``head`` was), its sum and its absolute sum."""
    assert list(now.shape) == pin["shape"], f"{what}: shape {list(now.shape)} != pinned {pin['shape']}"
    assert_close_to_magnitude(head_now, torch.tensor(pin["head"], dtype=torch.float64), what + " head")
    for key, value in (("sum", now.double().sum().item()), ("abs_sum", now.double().abs().sum().item())):
        pinned = pin[key]
        if math.isnan(pinned):  # a fault that makes NaN somewhere must keep making one
            assert math.isnan(value), f"{what}: {key} is {value}, pinned NaN"
            continue
        allowed = RTOL * abs(pin["abs_sum"])
        assert abs(value - pinned) <= allowed, f"{what}: {key} {value!r} vs pinned {pinned!r}, allowed {allowed:.3g}"
