"""Rotary positional embedding, RoPE (Su et al. 2021, "RoFormer").

Each pair of dimensions of q and k is rotated by an angle proportional to the position::

    theta_i = base^(-2i / Dh),   (x_a, x_b) -> (x_a cos(p theta_i) - x_b sin(p theta_i),
                                               x_a sin(p theta_i) + x_b cos(p theta_i))

A rotation by ``p`` on q and by ``s`` on k leaves ``q . k`` depending only on ``s - p``: relative position
through absolute rotations (the "rotation" idea the post sees in sinusoidal PE, applied inside attention).

Two layouts pair the dimensions differently and are both in the wild:
``"half"``         dimension ``i`` pairs with ``i + Dh/2`` (Hugging Face Llama, GPT-NeoX);
``"interleaved"``  dimension ``2i`` pairs with ``2i + 1`` (Meta's original Llama, GPT-J, RoFormer).
A checkpoint trained in one layout works in the other after permuting the q/k projection rows
(``anatomy.interop`` does it). Angles are computed in float32 whatever the activation dtype.
"""

from __future__ import annotations

import torch

from anatomy.components.positional.base import PositionalScheme
from anatomy.shapes import compute_dtype

ROPE_LAYOUTS = ("half", "interleaved")


def rope_angles(positions: torch.Tensor, head_dim: int, base: float,
                dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """``(B|1, T)`` → ``(B|1, 1, T, Dh/2)`` angles ``p * theta_i`` (float32, or float64 for float64 inputs)."""
    inv_freq = base ** (-torch.arange(0, head_dim, 2, dtype=dtype, device=positions.device) / head_dim)
    return (positions.to(dtype)[..., None] * inv_freq)[:, None]  # (B|1, 1, T, Dh/2)


def apply_rope(x: torch.Tensor, angles: torch.Tensor, layout: str) -> torch.Tensor:
    """Rotate ``x: (B, H, T, Dh)`` by ``angles: (B|1, 1, T, Dh/2)``; computed in float32, returned in x.dtype."""
    cos, sin = angles.cos(), angles.sin()
    xf = x.to(angles.dtype)
    if layout == "half":
        x1, x2 = xf.chunk(2, dim=-1)  # (B, H, T, Dh/2) each
        out = torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)  # (B, H, T, Dh)
    else:
        x1, x2 = xf[..., 0::2], xf[..., 1::2]  # (B, H, T, Dh/2) each
        out = torch.stack([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).flatten(-2)  # (B, H, T, Dh)
    return out.to(x.dtype)


class RotaryPositional(PositionalScheme):
    site = "attention"

    def __init__(self, *, head_dim: int, base: float = 10000.0, layout: str = "half", **_: object) -> None:
        super().__init__()
        if head_dim % 2:
            raise ValueError("positional='rope' needs an even head dimension Dh = d_model // n_heads, "
                             f"got Dh={head_dim}")
        if layout not in ROPE_LAYOUTS:
            raise ValueError(f"unknown rope_layout {layout!r}; valid names: {', '.join(ROPE_LAYOUTS)}")
        if base <= 1:
            raise ValueError(f"rope_base must be > 1, got {base}")
        self.head_dim, self.base, self.layout = head_dim, base, layout

    def rotate(self, q, k, q_pos, k_pos):
        dtype = compute_dtype(q.dtype)
        q = apply_rope(q, rope_angles(q_pos, self.head_dim, self.base, dtype), self.layout)
        k = apply_rope(k, rope_angles(k_pos, self.head_dim, self.base, dtype), self.layout)
        return q, k

    def extra_repr(self) -> str:
        return f"head_dim={self.head_dim}, base={self.base}, layout={self.layout!r}"
