"""Learned absolute positional embeddings (BERT, GPT-2): one trained vector per position, added.

Simple and task-driven, but a table has a last row: a sequence longer than ``max_seq_len`` has no embedding
(post §3.3: "需要预设最大长度超出部分没有参数无外推能力"). We refuse such input with a clear error.
"""

from __future__ import annotations

import torch
from torch import nn

from anatomy.components.positional.base import PositionalScheme


class LearnedPositional(PositionalScheme):
    site = "embedding"

    def __init__(self, *, d_model: int, max_seq_len: int) -> None:
        super().__init__()
        self.max_seq_len = max_seq_len
        self.weight = nn.Parameter(torch.zeros(max_seq_len, d_model))
        nn.init.normal_(self.weight, std=0.02)

    def add_to_embeddings(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        # (a meta tensor has no values: a shapes-only trace, ``anatomy trace --preset``)
        if (
            positions.numel()
            and not positions.is_meta
            and not torch.compiler.is_compiling()
            and int(positions.max()) >= self.max_seq_len
        ):
            raise ValueError(
                f"position {int(positions.max())} is past the learned positional table "
                f"(max_seq_len={self.max_seq_len}); learned positions cannot extrapolate"
            )
        return x + self.weight[positions].to(x.dtype)  # (B, T, D)
