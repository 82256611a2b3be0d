"""The one small interface every positional scheme implements.

Self-attention is blind to order (post §3.1): permuting the tokens permutes the outputs and nothing else. A
positional scheme puts order back at exactly one *site*:

``"embedding"``  added to the token embeddings once, before the first block (sinusoidal, learned);
``"attention"``  inside every attention layer: rotate q and k (RoPE), or add a bias to the scores (ALiBi), or a
                 key and a value term (Shaw);
``"model"``      a score bias computed once per forward by the stack and shared by all layers (T5);
``"none"``       nowhere (the post's "no positional encoding" experiment).

The attention module never asks *which* scheme it holds: it calls the hooks below, which default to "do
nothing". ``positions`` are integer tensors ``(B|1, T)``, so left-padded batches can pass positions derived from
the mask.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

import torch
from torch import nn

if TYPE_CHECKING:
    from anatomy.components.context import AttentionContext


class PositionalScheme(nn.Module):
    site: ClassVar[str] = "none"

    def add_to_embeddings(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        return x

    def rotate(
        self, q: torch.Tensor, k: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return q, k

    def score_bias(
        self, q: torch.Tensor | None, q_pos: torch.Tensor, k_pos: torch.Tensor, scale: float
    ) -> torch.Tensor | None:
        """Float bias broadcastable to ``(B, H, T, S)`` added to the scaled scores, or ``None``."""
        return None

    def value_bias(self, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor | None:
        """``(B|1, T, S, Dh)`` term added to the values per (query, key) pair, or ``None``."""
        return None

    # The attention module calls these two with the forward's AttentionContext (components/context.py); a scheme
    # with a per-forward table (RoPE's cos/sin, ALiBi's bias) overrides them to compute it once per forward.
    has_value_term: ClassVar[bool] = False  # value_bias returns a tensor (Shaw): a kernel must add it

    def rotate_for(self, ctx: AttentionContext, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``rotate`` for the new queries and keys of one call; both sit at ``ctx.positions``."""
        return self.rotate(q, k, ctx.positions, ctx.positions)

    def score_bias_for(
        self, ctx: AttentionContext, q: torch.Tensor, k_pos: torch.Tensor, scale: float
    ) -> torch.Tensor | None:
        return self.score_bias(q, ctx.positions, k_pos, scale)


class NoPositional(PositionalScheme):
    """No positional information at all: the encoder is then permutation-equivariant."""

    site = "none"

    def __init__(self) -> None:
        super().__init__()


def relative_distance(q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
    """``(B|1, T)`` and ``(B|1, S)`` → ``(B|1, T, S)`` with entry ``k_pos[j] - q_pos[i]``."""
    return k_pos[:, None, :] - q_pos[:, :, None]  # (B|1, T, S)
