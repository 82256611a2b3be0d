"""Sinusoidal positional encoding (Vaswani et al. 2017, §3.5), added to the embeddings.

    PE(pos, 2i)   = sin(pos / base^(2i / D))
    PE(pos, 2i+1) = cos(pos / base^(2i / D))        base = 10000

Low dimensions turn fast (the post's dense saw-tooth), high dimensions slowly. Because
``sin(p + k)`` and ``cos(p + k)`` are fixed linear combinations of ``sin p`` and ``cos p``, ``PE(p + k) = M(k) PE(p)``
for a block-rotation matrix ``M(k)`` that does not depend on ``p`` (the post's §3.2; tested as a property). The
table is computed in float32 from the positions themselves, so any position has a value (no maximum length).
"""

from __future__ import annotations

import torch

from anatomy.components.positional.base import PositionalScheme
from anatomy.shapes import compute_dtype


def sinusoidal_table(
    positions: torch.Tensor, d_model: int, base: float = 10000.0, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """``positions: (...)`` → ``(..., D)``, sin on even and cos on odd dimensions (float32 unless asked)."""
    inv_freq = base ** (-torch.arange(0, d_model, 2, dtype=dtype, device=positions.device) / d_model)
    angles = positions.to(dtype)[..., None] * inv_freq  # (..., D/2)
    return torch.stack([angles.sin(), angles.cos()], dim=-1).flatten(-2)  # (..., D)


class SinusoidalPositional(PositionalScheme):
    site = "embedding"

    def __init__(self, *, d_model: int, base: float = 10000.0) -> None:
        super().__init__()
        if d_model % 2:
            raise ValueError(f"positional='sinusoidal' needs an even d_model (sin/cos pairs), got d_model={d_model}")
        self.d_model, self.base = d_model, base

    def add_to_embeddings(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        table = sinusoidal_table(positions, self.d_model, self.base, compute_dtype(x.dtype))
        return x + table.to(x.dtype)  # (B, T, D)
