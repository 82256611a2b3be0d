"""Key/value cache for incremental decoding.

At step ``n`` a decoder needs the keys and values of every earlier position, but those never change: computing
them again is wasted work. The cache keeps ``k, v: (B, Hkv, S, Dh)`` (after RoPE, so rotation happens once per
token) and the key positions ``(B|1, S)``; each step appends the new token's entries.

A cross-attention cache is filled once from the encoder memory and then only read.
"""

from __future__ import annotations

import torch


class KVCache:
    def __init__(self) -> None:
        self.k: torch.Tensor | None = None
        self.v: torch.Tensor | None = None
        self.positions: torch.Tensor | None = None

    def __len__(self) -> int:
        return 0 if self.k is None else self.k.shape[-2]

    def update(self, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor):
        """Append ``k, v: (B, Hkv, T, Dh)`` and ``positions: (B|1, T)``; return the full ``(k, v, positions)``."""
        if self.k is None:
            self.k, self.v, self.positions = k, v, positions
        else:
            if k.shape[0] != self.k.shape[0]:
                raise ValueError(f"kv_cache holds batch size {self.k.shape[0]}, got keys for batch {k.shape[0]}")
            self.k = torch.cat([self.k, k], dim=-2)  # (B, Hkv, S + T, Dh)
            self.v = torch.cat([self.v, v], dim=-2)  # (B, Hkv, S + T, Dh)
            b = max(self.positions.shape[0], positions.shape[0])
            self.positions = torch.cat(
                [self.positions.expand(b, -1), positions.expand(b, -1)], dim=-1
            )  # (B|1, S + T)
        return self.k, self.v, self.positions
