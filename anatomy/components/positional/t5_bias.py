"""T5's bucketed relative position bias (Raffel et al. 2020, §2.1).

One learned scalar per (bucket, head) is added to the attention scores. The relative distance ``j - i`` is put in
a bucket: exact buckets for small distances, logarithmically wider ones up to ``max_distance``, one last bucket
beyond. Encoders use both directions (half of the buckets each); decoders only look back. The bias is computed
once per forward and shared by every layer of the stack (site ``"model"``). T5 does not scale q.k by
``1/sqrt(Dh)``: its presets set ``attn_scale=1.0``.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from anatomy.components.positional.base import PositionalScheme, relative_distance


def t5_bucket(relative: torch.Tensor, *, bidirectional: bool, num_buckets: int, max_distance: int) -> torch.Tensor:
    """Map distances ``j - i`` to bucket ids in ``[0, num_buckets)``."""
    offset = torch.zeros_like(relative)
    if bidirectional:
        num_buckets //= 2
        offset = (relative > 0).long() * num_buckets  # keys after the query use the upper half
        distance = relative.abs()
    else:
        distance = (-relative).clamp_min(0)  # only the past has distinct buckets
    exact = num_buckets // 2
    log_ratio = torch.log(distance.clamp_min(exact).float() / exact) / math.log(max_distance / exact)
    far = (exact + (log_ratio * (num_buckets - exact)).long()).clamp_max(num_buckets - 1)
    return offset + torch.where(distance < exact, distance, far)


class T5RelativeBias(PositionalScheme):
    site = "model"

    def __init__(
        self, *, n_heads: int, bidirectional: bool = True, num_buckets: int = 32, max_distance: int = 128
    ) -> None:
        super().__init__()
        if num_buckets < 4 or max_distance <= num_buckets // 4:
            raise ValueError(
                f"t5 bias needs num_buckets >= 4 and max_distance > num_buckets/4, "
                f"got num_buckets={num_buckets}, max_distance={max_distance}"
            )
        self.bidirectional, self.num_buckets, self.max_distance = bidirectional, num_buckets, max_distance
        self.relative_attention_bias = nn.Embedding(num_buckets, n_heads)

    def score_bias(
        self, q: torch.Tensor | None, q_pos: torch.Tensor, k_pos: torch.Tensor, scale: float
    ) -> torch.Tensor:
        buckets = t5_bucket(
            relative_distance(q_pos, k_pos),
            bidirectional=self.bidirectional,
            num_buckets=self.num_buckets,
            max_distance=self.max_distance,
        )  # (B|1, T, S)
        per_bucket: torch.Tensor = self.relative_attention_bias(buckets)  # (B|1, T, S, H)
        return per_bucket.permute(0, 3, 1, 2)  # (B|1, H, T, S)
