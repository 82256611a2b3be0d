"""Key/value cache for incremental decoding.

At step ``n`` a decoder needs the keys and values of every earlier position, but those never change: computing
them again is wasted work. The cache keeps ``k, v: (B, Hkv, S, Dh)`` (after RoPE, so rotation happens once per
token) and the key positions ``(B|1, S)``; each step appends the new token's entries.

Appending by ``torch.cat`` would copy the whole cache every step (O(S) bytes per token, O(S^2) per sequence).
Instead the entries live in a buffer with spare room along S, and ``k``/``v``/``positions`` are views of the held
slots: a step writes only the new slots. The buffer doubles when full (or starts at ``capacity`` when the caller
knows the final length, as ``generate`` does). When autograd is recording and the new entries need gradients, the
cache falls back to ``torch.cat`` so no tensor saved for backward is ever overwritten.

With ``window=W`` (sliding-window attention) the cache *rolls*, as Mistral's does: no query after the current ones
can see more than the last ``W - 1`` earlier slots, so an update first drops everything older. It then holds at
most ``W - 1 + T`` entries for ``T`` new ones: memory O(W), not O(S). ``seen`` counts every entry ever appended
(the next position, and the width of an attention mask over the whole sequence); ``len(cache)`` counts the ones
held, which are always the *last* ``len(cache)`` of the ``seen``.

A cross-attention cache is filled once from the encoder memory and then only read.
"""

from __future__ import annotations

import torch


class KVCache:
    def __init__(self, capacity: int | None = None, *, window: int | None = None) -> None:
        for name, value in (("capacity", capacity), ("window", window)):
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise ValueError(f"{name} must be a positive integer or None, got {value!r}")
        # a rolling cache never needs the whole sequence: twice the window bounds the buffer (compaction then
        # moves W entries once every ~W steps)
        self.capacity = capacity if window is None or capacity is None else min(capacity, 2 * window)
        self.window = window
        self.seen = 0  # entries ever appended
        self.k: torch.Tensor | None = None  # (B, Hkv, S, Dh), a view of _k_buf when buffered
        self.v: torch.Tensor | None = None
        self.positions: torch.Tensor | None = None  # (B|1, S)
        # the three buffers are set and cleared together; C >= S
        self._k_buf: torch.Tensor | None = None  # (B, Hkv, C, Dh)
        self._v_buf: torch.Tensor | None = None  # (B, Hkv, C, Dh)
        self._pos_buf: torch.Tensor | None = None  # (B|1, C)
        self._start = 0  # the held entries are buffer slots [_start, _start + len)

    def __len__(self) -> int:
        return 0 if self.k is None else self.k.shape[-2]

    def update(
        self, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Append ``k, v: (B, Hkv, T, Dh)`` and ``positions: (B|1, T)``; return the held ``(k, v, positions)``:
        every entry so far, or with a window the last ``W - 1`` earlier ones and the ``T`` new ones."""
        if self.k is not None and k.shape[0] != self.k.shape[0]:
            raise ValueError(f"kv_cache holds batch size {self.k.shape[0]}, got keys for batch {k.shape[0]}")
        t = k.shape[-2]
        if self.window is not None and len(self) > self.window - 1:
            self._keep_last(self.window - 1)  # older slots are outside every future query's window
        self.seen += t
        if torch.is_grad_enabled() and (k.requires_grad or v.requires_grad):
            return self._concatenate(k, v, positions)
        s, start, buf, pos_buf = len(self), self._start, self._k_buf, self._pos_buf
        if buf is not None and start + s + t > buf.shape[-2] and s + t <= buf.shape[-2]:
            self._compact()  # room at the front: move the held entries there instead of growing
            start = 0
        # pos_buf is None exactly when buf is (the buffers are set together): its test only narrows the type
        if (
            buf is None
            or pos_buf is None
            or start + s + t > buf.shape[-2]
            or positions.shape[0] > pos_buf.shape[0]
            or buf.dtype != k.dtype
            or buf.device != k.device
        ):
            self._grow(s + t, k, v, positions)
            start = 0
        k_buf, v_buf, pos_buf = self._k_buf, self._v_buf, self._pos_buf
        assert k_buf is not None and v_buf is not None and pos_buf is not None  # held before, or made by _grow
        end = start + s
        # narrow + copy_ rather than slice assignment: the same writes, without parsing an index per call
        k_buf.narrow(-2, end, t).copy_(k)
        v_buf.narrow(-2, end, t).copy_(v)
        pos_buf.narrow(-1, end, t).copy_(positions)
        return self._view(start, s + t)

    @property
    def keys(self) -> torch.Tensor | None:
        """``k`` by the name Hugging Face's cache layers use: ``(B, Hkv, S, Dh)``."""
        return self.k

    @property
    def values(self) -> torch.Tensor | None:
        return self.v

    def batch_select(self, indices: torch.Tensor) -> None:
        """Keep the batch rows ``indices: (B',)`` in that order (beam search reorders its beams this way)."""
        if self.k is None:
            return
        indices = indices.to(self.k.device)
        if self._k_buf is None:
            assert self.v is not None and self.positions is not None  # held with k
            self.k, self.v = self.k.index_select(0, indices), self.v.index_select(0, indices)
            if self.positions.shape[0] > 1:
                self.positions = self.positions.index_select(0, indices)
            return
        assert self._v_buf is not None and self._pos_buf is not None  # made with _k_buf
        self._k_buf, self._v_buf = self._k_buf.index_select(0, indices), self._v_buf.index_select(0, indices)
        if self._pos_buf.shape[0] > 1:
            self._pos_buf = self._pos_buf.index_select(0, indices)
        self._view(self._start, len(self))

    def _view(self, start: int, n: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Hold the buffer slots ``[start, start + n)``; return them as ``(k, v, positions)``."""
        assert self._k_buf is not None and self._v_buf is not None and self._pos_buf is not None  # buffered
        self._start = start
        self.k, self.v = k, v = self._k_buf.narrow(-2, start, n), self._v_buf.narrow(-2, start, n)  # (B, Hkv, n, Dh)
        self.positions = positions = self._pos_buf.narrow(-1, start, n)  # (B|1, n)
        return k, v, positions

    def _keep_last(self, n: int) -> None:
        """Hold only the last ``n`` entries (a window's roll); nothing is copied."""
        drop = len(self) - n
        if self._k_buf is None:  # concatenated tensors: slice them
            assert self.k is not None and self.v is not None and self.positions is not None  # len(self) > n
            self.k, self.v, self.positions = self.k[..., drop:, :], self.v[..., drop:, :], self.positions[..., drop:]
        else:
            self._view(self._start + drop, n)

    def _compact(self) -> None:
        """Move the held entries to the front of the buffers (a rolling cache that reached the buffer's end)."""
        s = len(self)
        assert self._k_buf is not None and self._v_buf is not None and self._pos_buf is not None  # buffered
        assert self.k is not None and self.v is not None and self.positions is not None  # views of them
        for buf, held in ((self._k_buf, self.k), (self._v_buf, self.v)):
            buf.narrow(-2, 0, s).copy_(held.clone())  # the ranges may overlap: copy through a fresh tensor
        self._pos_buf.narrow(-1, 0, s).copy_(self.positions.clone())
        self._view(0, s)

    def _grow(self, needed: int, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor) -> None:
        """New buffers with room for at least ``needed`` entries (double the old room); keep what is held."""
        old = 0 if self._k_buf is None else self._k_buf.shape[-2]
        room = max(needed, 2 * old, self.capacity or 0, 16)
        if self.window is not None:  # no doubling past what the window can ever hold at once
            room = max(needed, min(room, max(2 * self.window, 16)))
        b, hkv, _, dh = k.shape
        k_buf = k.new_empty(b, hkv, room, dh)
        v_buf = v.new_empty(b, hkv, room, v.shape[-1])
        b_pos = max(positions.shape[0], 1 if self.positions is None else self.positions.shape[0])
        pos_buf = positions.new_empty(b_pos, room)
        s = len(self)
        if s:
            assert self.k is not None and self.v is not None and self.positions is not None  # s entries held
            k_buf[..., :s, :] = self.k
            v_buf[..., :s, :] = self.v
            pos_buf[:, :s] = self.positions
        self._k_buf, self._v_buf, self._pos_buf = k_buf, v_buf, pos_buf
        if s:
            self._view(0, s)
        else:
            self._start = 0

    def _concatenate(
        self, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Out-of-place append (autograd-safe): every step allocates the full ``(B, Hkv, S + T, Dh)``."""
        self._k_buf = self._v_buf = self._pos_buf = None
        self._start = 0
        if self.k is None:
            self.k, self.v, self.positions = k, v, positions
        else:
            assert self.v is not None and self.positions is not None  # held with k
            self.k = torch.cat([self.k, k], dim=-2)  # (B, Hkv, S + T, Dh)
            self.v = torch.cat([self.v, v], dim=-2)  # (B, Hkv, S + T, Dh)
            b = max(self.positions.shape[0], positions.shape[0])
            self.positions = torch.cat([self.positions.expand(b, -1), positions.expand(b, -1)], dim=-1)  # (B|1, S + T)
        return self.k, self.v, self.positions


class StaticKVCache:
    """A KV cache of fixed shape for a compiled decode step: ``k, v: (B, Hkv, L, Dh)`` and key positions
    ``(B, L)`` reserved once for the generation's final length ``L``, written by index.

    ``cursor`` (a one-element long tensor) is the next free slot. ``update`` writes the ``T`` new entries at slots
    ``cursor + arange(T)`` (``index_copy_``), advances the cursor in place and returns the *whole* buffers, so
    every call sees tensors of one shape and no Python number changes between steps: a compiled step runs the
    same graph for every token. Which slots a query may read is the attention context's business
    (``AttentionContext.slots``): key slot ``j`` is visible to the query in slot ``i`` when ``j <= i`` (written
    already, and causal at once), and with a window ``W`` when also ``j > i - W``; slots not written yet hold zeros
    (finite, so a weight of exactly 0 on them adds exactly 0). A sliding-window layer keeps all ``L`` slots here
    (memory O(L), not the rolling cache's O(W)): the band in the mask, not the buffer, limits what it reads.

    Made from a filled :class:`KVCache` (``from_cache``, after the prefill) and turned back into one
    (``to_cache``) when the generation ends, so what a caller gets back is the ordinary cache."""

    def __init__(
        self,
        k: torch.Tensor,
        v: torch.Tensor,
        positions: torch.Tensor,
        cursor: torch.Tensor,
        *,
        window: int | None = None,
    ) -> None:
        self.k_buf, self.v_buf, self.pos_buf = k, v, positions  # (B, Hkv, L, Dh) twice, (B, L)
        self.cursor = cursor  # (1,) long: the next slot to write
        self.window = window
        self.capacity = k.shape[-2]

    @classmethod
    def from_cache(cls, cache: KVCache, capacity: int) -> StaticKVCache:
        """Buffers of ``capacity`` slots holding ``cache``'s entries in the slots they were written to (a rolling
        cache's dropped slots stay zero: no query of a windowed layer reaches them again)."""
        k, v, positions = cache.k, cache.v, cache.positions
        if k is None or v is None or positions is None:
            raise ValueError("a static cache is made from a filled cache (run the prefill first)")
        if cache.seen > capacity:
            raise ValueError(f"capacity must be >= the {cache.seen} entries seen, got {capacity}")
        b, hkv, held, dh = k.shape
        first = cache.seen - held  # the slot of the oldest held entry
        k_buf = k.new_zeros(b, hkv, capacity, dh)
        v_buf = v.new_zeros(b, hkv, capacity, v.shape[-1])
        pos_buf = positions.new_zeros(b, capacity)
        k_buf[..., first : cache.seen, :] = k
        v_buf[..., first : cache.seen, :] = v
        pos_buf[:, first : cache.seen] = positions  # (B|1, held) broadcast over the rows
        cursor = torch.full((1,), cache.seen, dtype=torch.long, device=k.device)
        return cls(k_buf, v_buf, pos_buf, cursor, window=cache.window)

    @property
    def seen(self) -> int:
        """Entries written so far (reads the cursor: outside a compiled step only)."""
        return int(self.cursor)

    def __len__(self) -> int:
        return self.seen

    def slots(self, t: int) -> torch.Tensor:
        """``(T,)`` the slots the next ``t`` entries go to."""
        return self.cursor + torch.arange(t, device=self.cursor.device)

    def update(
        self, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Write ``k, v: (B, Hkv, T, Dh)`` and ``positions: (B|1, T)`` at the cursor, advance it; return the whole
        buffers ``(B, Hkv, L, Dh)`` twice and ``(B, L)``."""
        t = k.shape[-2]
        slots = self.slots(t)
        self.k_buf.index_copy_(2, slots, k.to(self.k_buf.dtype))
        self.v_buf.index_copy_(2, slots, v.to(self.v_buf.dtype))
        self.pos_buf.index_copy_(1, slots, positions.expand(self.pos_buf.shape[0], t).to(self.pos_buf.dtype))
        self.cursor.add_(t)
        return self.k_buf, self.v_buf, self.pos_buf

    @property
    def k(self) -> torch.Tensor:
        """The written slots ``(B, Hkv, S, Dh)`` (reads the cursor: outside a compiled step only)."""
        return self.k_buf[..., : self.seen, :]

    @property
    def v(self) -> torch.Tensor:
        return self.v_buf[..., : self.seen, :]

    @property
    def positions(self) -> torch.Tensor:
        return self.pos_buf[:, : self.seen]

    keys = k
    values = v

    def batch_select(self, indices: torch.Tensor) -> None:
        """Keep the batch rows ``indices: (B,)`` in that order (beam search), in place: the buffers keep their
        identity and shape, so a compiled step keeps its graph."""
        indices = indices.to(self.k_buf.device)
        for buf in (self.k_buf, self.v_buf, self.pos_buf):
            buf.copy_(buf.index_select(0, indices))

    def to_cache(self) -> KVCache:
        """The written entries in an ordinary :class:`KVCache` (what ``generate`` hands back)."""
        cache = KVCache(window=self.window)
        seen = self.seen
        if seen:
            cache.update(self.k_buf[..., :seen, :], self.v_buf[..., :seen, :], self.pos_buf[:, :seen])
        return cache
