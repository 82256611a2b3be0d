"""ALiBi: attention with linear biases (Press et al. 2022, "Train Short, Test Long").

No embedding at all: each head ``h`` adds ``-m_h * |i - j|`` to the score of query ``i`` and key ``j``. The slopes
are a geometric sequence: for ``n`` heads (a power of two) ``m_h = 2^(-8h/n)``, h = 1..n; for other head counts the
paper takes the slopes of the next lower power of two and fills in every other slope of the next higher one.
Far keys are penalised linearly, which is what lets ALiBi run on sequences longer than it was trained on.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, cast

import torch

from anatomy.components.positional.base import PositionalScheme, relative_distance

if TYPE_CHECKING:
    from anatomy.components.context import AttentionContext


def alibi_slopes(n_heads: int) -> torch.Tensor:
    def power_of_two(n: int) -> list[float]:
        start = 2 ** (-8 / n)
        return [start ** (h + 1) for h in range(n)]

    lower = 2 ** math.floor(math.log2(n_heads))
    slopes = power_of_two(lower)
    if lower < n_heads:
        slopes += power_of_two(2 * lower)[0::2][: n_heads - lower]
    return torch.tensor(slopes, dtype=torch.float32)


class ALiBiPositional(PositionalScheme):
    site = "attention"
    slopes: torch.Tensor  # (H,) buffer

    def __init__(self, *, n_heads: int) -> None:
        super().__init__()
        self.register_buffer("slopes", alibi_slopes(n_heads), persistent=False)

    def score_bias(
        self, q: torch.Tensor | None, q_pos: torch.Tensor, k_pos: torch.Tensor, scale: float
    ) -> torch.Tensor:
        distance = relative_distance(q_pos, k_pos).abs().float()  # (B|1, T, S)
        return -self.slopes[None, :, None, None] * distance[:, None]  # (B|1, H, T, S)

    def score_bias_for(self, ctx: AttentionContext, q: torch.Tensor, k_pos: torch.Tensor, scale: float) -> torch.Tensor:
        """One bias per forward for every layer with as many heads and held keys (the layers' caches advance
        together, so equal key counts mean equal key positions)."""
        key = ("alibi", self.slopes.shape[0], tuple(k_pos.shape))
        return cast(torch.Tensor, ctx.table(key, lambda: self.score_bias(q, ctx.positions, k_pos, scale)))
