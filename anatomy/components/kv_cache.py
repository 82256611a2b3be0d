"""Key/value cache for incremental decoding.

At step ``n`` a decoder needs the keys and values of every earlier position, but those never change: computing
them again is wasted work. The cache keeps ``k, v: (B, Hkv, S, Dh)`` (after RoPE, so rotation happens once per
token) and the key positions ``(B|1, S)``; each step appends the new token's entries.

Appending by ``torch.cat`` would copy the whole cache every step (O(S) bytes per token, O(S^2) per sequence).
Instead the entries live in a buffer with spare room along S, and ``k``/``v``/``positions`` are views of its first
``S`` slots: a step writes only the new slots. The buffer doubles when full (or starts at ``capacity`` when the
caller knows the final length, as ``generate`` does). When autograd is recording and the new entries need
gradients, the cache falls back to ``torch.cat`` so no tensor saved for backward is ever overwritten.

A cross-attention cache is filled once from the encoder memory and then only read.
"""

from __future__ import annotations

import torch


class KVCache:
    def __init__(self, capacity: int | None = None) -> None:
        if capacity is not None and (not isinstance(capacity, int) or isinstance(capacity, bool) or capacity < 1):
            raise ValueError(f"capacity must be a positive integer or None, got {capacity!r}")
        self.capacity = capacity
        self.k: torch.Tensor | None = None  # (B, Hkv, S, Dh), a view of _k_buf when buffered
        self.v: torch.Tensor | None = None
        self.positions: torch.Tensor | None = None  # (B|1, S)
        self._k_buf = self._v_buf = self._pos_buf = None  # (B, Hkv, C, Dh), (B, Hkv, C, Dh), (B|1, C); C >= S

    def __len__(self) -> int:
        return 0 if self.k is None else self.k.shape[-2]

    def update(self, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor):
        """Append ``k, v: (B, Hkv, T, Dh)`` and ``positions: (B|1, T)``; return the full ``(k, v, positions)``."""
        if self.k is not None and k.shape[0] != self.k.shape[0]:
            raise ValueError(f"kv_cache holds batch size {self.k.shape[0]}, got keys for batch {k.shape[0]}")
        if torch.is_grad_enabled() and (k.requires_grad or v.requires_grad):
            return self._concatenate(k, v, positions)
        s, t = len(self), k.shape[-2]
        buf = self._k_buf
        if (buf is None or s + t > buf.shape[-2] or positions.shape[0] > self._pos_buf.shape[0]
                or buf.dtype != k.dtype or buf.device != k.device):
            self._grow(s + t, k, v, positions)
        # narrow + copy_ rather than slice assignment: the same writes, without parsing an index per call
        self._k_buf.narrow(-2, s, t).copy_(k)
        self._v_buf.narrow(-2, s, t).copy_(v)
        self._pos_buf.narrow(-1, s, t).copy_(positions)
        self.k, self.v = self._k_buf.narrow(-2, 0, s + t), self._v_buf.narrow(-2, 0, s + t)  # (B, Hkv, S+T, Dh)
        self.positions = self._pos_buf.narrow(-1, 0, s + t)  # (B|1, S + T)
        return self.k, self.v, self.positions

    def _grow(self, needed: int, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor) -> None:
        """New buffers with room for at least ``needed`` entries (double the old room); keep what is cached."""
        old = 0 if self._k_buf is None else self._k_buf.shape[-2]
        room = max(needed, 2 * old, self.capacity or 0, 16)
        b, hkv, _, dh = k.shape
        k_buf = k.new_empty(b, hkv, room, dh)
        v_buf = v.new_empty(b, hkv, room, v.shape[-1])
        b_pos = max(positions.shape[0], 1 if self.positions is None else self.positions.shape[0])
        pos_buf = positions.new_empty(b_pos, room)
        s = len(self)
        if s:
            k_buf[..., :s, :] = self.k
            v_buf[..., :s, :] = self.v
            pos_buf[:, :s] = self.positions
        self._k_buf, self._v_buf, self._pos_buf = k_buf, v_buf, pos_buf

    def _concatenate(self, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor):
        """Out-of-place append (autograd-safe): every step allocates the full ``(B, Hkv, S + T, Dh)``."""
        self._k_buf = self._v_buf = self._pos_buf = None
        if self.k is None:
            self.k, self.v, self.positions = k, v, positions
        else:
            self.k = torch.cat([self.k, k], dim=-2)  # (B, Hkv, S + T, Dh)
            self.v = torch.cat([self.v, v], dim=-2)  # (B, Hkv, S + T, Dh)
            b = max(self.positions.shape[0], positions.shape[0])
            self.positions = torch.cat(
                [self.positions.expand(b, -1), positions.expand(b, -1)], dim=-1
            )  # (B|1, S + T)
        return self.k, self.v, self.positions
