"""Shaw et al. (2018) relative position representations, "Self-Attention with Relative Position Representations".

Each clipped distance ``d = clip(j - i, -k, k)`` has two learned vectors of width Dh, shared by all heads:
``a^K_d`` joins the key and ``a^V_d`` joins the value::

    e_ij = q_i . (k_j + a^K_d) * scale            z_i = sum_j w_ij (v_j + a^V_d)

The key term is an additive score bias; the value term needs the weights, so the fused SDPA kernel cannot
express it (kernel ``auto`` picks ``math``). Beyond ``k`` all distances share one vector, which is why Shaw
generalises past the training length.
"""

from __future__ import annotations

import torch
from torch import nn

from anatomy.components.positional.base import PositionalScheme, relative_distance


class ShawRelativePositional(PositionalScheme):
    site = "attention"
    has_value_term = True

    def __init__(self, *, head_dim: int, max_relative_distance: int = 16) -> None:
        super().__init__()
        if max_relative_distance < 1:
            raise ValueError(f"max_relative_distance must be >= 1, got {max_relative_distance}")
        self.max_relative_distance = max_relative_distance
        n = 2 * max_relative_distance + 1
        self.key_embeddings = nn.Parameter(torch.randn(n, head_dim) * 0.02)
        self.value_embeddings = nn.Parameter(torch.randn(n, head_dim) * 0.02)

    def _index(self, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
        k = self.max_relative_distance
        return relative_distance(q_pos, k_pos).clamp(-k, k) + k  # (B|1, T, S)

    def score_bias(
        self, q: torch.Tensor | None, q_pos: torch.Tensor, k_pos: torch.Tensor, scale: float
    ) -> torch.Tensor:
        assert q is not None, "Shaw's key term needs the queries"
        per_distance = torch.matmul(q, self.key_embeddings.to(q.dtype).t())  # (B, H, T, 2k+1)
        index = self._index(q_pos, k_pos)[:, None].expand(q.shape[0], q.shape[1], -1, -1)  # (B, H, T, S)
        return per_distance.gather(-1, index) * scale  # (B, H, T, S)

    def value_bias(self, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
        return self.value_embeddings[self._index(q_pos, k_pos)]  # (B|1, T, S, Dh)
