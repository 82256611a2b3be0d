"""``AttentionContext``: what every attention layer of one forward shares, computed once by the model.

A forward of an N-layer model asks the same questions N times: where are the queries, how many keys did the cache
already hold, which keys may each query see, what are this position's RoPE cos/sin. The answers do not depend on
the layer, so the model (or the stack, or a standalone attention call) answers them once, in
:func:`build_context`, and every layer reads them:

    positions      (B|1, T) query positions (given, counted from a left-padded mask, or ``past + arange(T)``)
    past           entries the self-attention cache had seen before this call (0 without a cache)
    mask           ONE validated boolean mask ``(B|1, H|1, T, S)`` (key padding and an explicit attention mask,
                   True = may attend), or ``None``; ``S = past + T`` for self-attention
    slots          ``(T,)`` the queries' slots in a static cache (``kv_cache.StaticKVCache``: ``S`` is its fixed
                   width and the mask plan hides what is not written yet), or ``None``: the last T of S
    is_causal      the causal rule, folded in by :meth:`AttentionContext.kernel_mask`
    bias           a score bias shared by every layer (T5's, computed by the stack), or ``None``
    cross_ctx      the cross-attention context of a decoder: the encoder memory's mask, ``S`` = memory length

Per-layer differences stay per layer but are still computed once each: :meth:`kernel_mask` folds the causal
rule and a layer's sliding window into the mask (and cuts it to a rolling cache's slots), memoised per
``(window, S)``; :meth:`table` memoises per-forward tables of the positional schemes (RoPE's cos/sin, ALiBi's
bias) under the scheme's own key, so four layers with equal schemes share one table.

Layers never fill in defaults: a layer called on its own takes the context ``attention_inputs(layer, x, mask=...)``
builds (components/inputs.py) through the same :func:`build_context` the models use.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field

import torch

from anatomy.components.kv_cache import KVCache, StaticKVCache
from anatomy.components.masks import (
    as_attention_mask,
    causal_mask,
    key_padding_to_attention,
    positions_from_mask,
    sliding_window_mask,
)
from anatomy.shapes import check_rank


def check_positions(name: str, given: torch.Tensor | None, b: int, t: int) -> torch.Tensor | None:
    """Position ids ``(B|1, T)`` given by the caller as its argument ``name``: rank 2, ``T`` columns, ``B`` or 1
    rows, integers (``None`` passes)."""
    if given is None:
        return None
    check_rank(name, given, 2, "(B, T)")
    if given.shape[-1] != t:
        raise ValueError(f"{name} must have T={t} columns, got shape {tuple(given.shape)}")
    if given.shape[0] not in (1, b):
        raise ValueError(f"{name} must have shape (B|1, T={t}) with B={b}, got {tuple(given.shape)}")
    if given.is_floating_point() or given.dtype == torch.bool:
        raise TypeError(f"{name} must hold integers, got dtype {given.dtype}")
    return given


def query_positions(
    t: int,
    past: int,
    device: torch.device | str | None,
    *,
    given: torch.Tensor | None,
    counted: torch.Tensor | None,
    slots: torch.Tensor | None = None,
) -> torch.Tensor:
    """Query positions ``(B|1, T)``, decided in this one place: ``given`` ids (checked), else counted from a
    ``(B, S)`` padding mask (left padding: a padded prompt sees the positions of the prompt alone), else
    ``past + arange(T)``. With a static cache the queries sit in the key ``slots (T,)``, not in the last T."""
    if given is not None:
        return given
    if counted is not None:
        counts = positions_from_mask(counted)  # (B, S)
        return counts[:, -t:] if slots is None else counts.index_select(1, slots)  # (B, T)
    if slots is not None:
        return slots[None]  # (1, T): no padding, so a slot is a position
    return torch.arange(past, past + t, device=device)[None]  # (1, T)


AnyCache = KVCache | StaticKVCache


def first_cache(kv_caches: Sequence[AnyCache | tuple[AnyCache, AnyCache]] | None) -> AnyCache | None:
    """The first layer's self-attention cache (a seq2seq layer holds a ``(self, cross)`` pair), or None."""
    if not kv_caches:
        return None
    first = kv_caches[0]
    return first[0] if isinstance(first, tuple) else first


def cache_seen(kv_caches: Sequence[AnyCache | tuple[AnyCache, AnyCache]] | None, t: int = 0) -> int:
    """The key slots before a call's ``t`` new ones: the entries the first layer's self-attention cache has seen,
    or for a static cache every slot but the ``t`` new (its width is fixed: ``S = L``, the mask plan hides the slots
    not written yet)."""
    first = first_cache(kv_caches)
    if first is None:
        return 0
    if isinstance(first, StaticKVCache):
        return first.capacity - t
    return first.seen


def hf_padding(name: str, attention_mask: torch.Tensor | None, b: int, s: int) -> torch.Tensor | None:
    """A Hugging Face ``(B, S)`` mask given as the caller's argument ``name`` (bool, or integers 0/1; 1 = real
    token) → boolean ``(B, S)`` or ``None``."""
    if attention_mask is None:
        return None
    check_rank(name, attention_mask, 2, "(B, S) with 1/True on real tokens")
    if attention_mask.shape != (b, s):
        raise ValueError(f"{name} must have shape (B={b}, S={s}), got {tuple(attention_mask.shape)}")
    if attention_mask.dtype == torch.bool:
        return attention_mask
    if attention_mask.is_floating_point():
        raise TypeError(f"{name} must be bool or integer 0/1 (1 = real token), got dtype {attention_mask.dtype}")
    if (
        attention_mask.numel()
        and not torch.compiler.is_compiling()  # a value check: eager only, no graph break
        and not bool(((attention_mask == 0) | (attention_mask == 1)).all())
    ):
        raise ValueError(f"{name} must hold only 0 and 1 (1 = real token)")
    return attention_mask.bool()


def key_padding(name: str, key_padding_mask: torch.Tensor | None, b: int, s: int) -> torch.Tensor | None:
    """A ``(B, S)`` boolean key-padding mask (True on real keys) given as the caller's argument ``name``, checked."""
    if key_padding_mask is None:
        return None
    key_padding_to_attention(key_padding_mask, name=name)  # dtype and rank
    if tuple(key_padding_mask.shape) != (b, s):
        raise ValueError(
            f"{name} must have shape (B={b}, S={s}) with True on real keys, got {tuple(key_padding_mask.shape)}"
        )
    return key_padding_mask


@dataclass(eq=False)
class AttentionContext:
    b: int
    t: int  # queries
    s: int  # keys: past + T for self-attention, the memory's length for cross-attention
    positions: torch.Tensor  # (B|1, T)
    mask: torch.Tensor | None  # (B|1, H|1, T, S), validated; no causal rule, no window
    is_causal: bool = False
    past: int = 0
    cross: bool = False
    bias: torch.Tensor | None = None  # (B|1, H, T, S), shared by every layer (T5)
    cross_ctx: AttentionContext | None = None  # a decoder's cross-attention context (over the memory)
    cache_positions: torch.Tensor | None = None  # (B|1, past): key positions the cache held before this call
    slots: torch.Tensor | None = None  # (T,) a static cache's slots of the queries (None: the last T of S)
    _masks: dict[tuple[int | None, int, bool], tuple[torch.Tensor | None, bool]] = field(
        default_factory=dict, repr=False
    )
    _tables: dict[Hashable, object] = field(default_factory=dict, repr=False)
    _key_positions: torch.Tensor | None = field(default=None, repr=False)

    @property
    def key_positions(self) -> torch.Tensor:
        """``(B|1, S)``: the cached keys' positions then the queries' (self), or ``arange(S)`` (cross)."""
        if self._key_positions is None:
            if self.cross:
                self._key_positions = torch.arange(self.s, device=self.positions.device)[None]  # (1, S)
            elif self.slots is not None and self.cache_positions is not None:  # a static cache: (B, L) by slot
                b, t = self.cache_positions.shape[0], self.t
                self._key_positions = self.cache_positions.index_copy(1, self.slots, self.positions.expand(b, t))
            elif not self.past or self.cache_positions is None:
                self._key_positions = self.positions
            else:
                b = max(self.positions.shape[0], self.cache_positions.shape[0])
                self._key_positions = torch.cat(
                    [self.cache_positions.expand(b, -1), self.positions.expand(b, -1)], dim=-1
                )  # (B|1, S)
        return self._key_positions

    def key_mask(self, s: int, heads: int = 1) -> torch.Tensor | None:
        """The context's mask (no causal rule, no window) over the ``s`` keys a layer holds: cut to the last ``s``
        slots when a rolling cache holds fewer than it covers. With a static cache (``slots``) it also hides the
        slots not written yet, which for a causal context is the causal rule by slot (key ``j`` <= query slot)."""
        mask = self.mask
        if self.slots is not None:  # a static cache: what is written, in causal order, by slot
            keys = torch.arange(s, device=self.slots.device)  # (S,)
            last = self.slots if self.is_causal else self.slots[-1:].expand(self.t)
            written = (keys[None, :] <= last[:, None])[None, None]  # (1, 1, T, S)
            return written if mask is None else mask & written
        if mask is not None and mask.shape[-1] != s:
            if mask.shape[-1] > s:
                return mask[..., -s:]  # a rolling cache holds the last S of the slots the mask covers
            as_attention_mask(mask, self.b, heads, self.t, s)  # raises the broadcast error
        return mask

    def kernel_mask(
        self, window: int | None, s: int, heads: int = 1, causal_flag: bool = False
    ) -> tuple[torch.Tensor | None, bool]:
        """The ``(mask, is_causal)`` a kernel gets for ``s`` held keys in a layer with sliding ``window`` (None:
        global): the final boolean mask, :meth:`key_mask` with the band or the causal rule ANDed in. ``is_causal``
        stays True only for a kernel that takes SDPA's causal flag (``causal_flag``) on a square call with no other
        mask. Memoised per argument set: work that does not depend on the layer is done once per forward, whatever
        the number of layers."""
        key = (window, s, causal_flag)
        hit = self._masks.get(key)
        if hit is not None:
            return hit
        mask, causal = self.key_mask(s, heads), self.is_causal and self.t > 1  # one query at the end sees all
        device = self.positions.device
        if self.slots is not None:  # a static cache: key_mask holds the causal rule; the band is by slot too
            if window is not None:
                keys = torch.arange(s, device=device)  # (S,)
                band = keys[None, :] > self.slots[:, None] - window  # (T, S)
                if not self.is_causal:
                    band = band & (keys[None, :] < self.slots[:, None] + window)
                mask = band[None, None] if mask is None else mask & band[None, None]
            hit = self._masks[key] = (mask, False)
            return hit
        if window is not None:  # local attention: a band of key slots, causal or not
            band = sliding_window_mask(self.t, s, window, causal=self.is_causal, device=device)[None, None]
            # ^ (1, 1, T, S), the rank every kernel mask has
            mask, causal = (band if mask is None else mask & band), False  # the band holds the causal part
        elif causal and not (causal_flag and mask is None and self.t == s):
            square = causal_mask(self.t, s, device=device)[None, None]  # (1, 1, T, S)
            mask, causal = (square if mask is None else mask & square), False  # (B|1, H|1, T, S)
        hit = self._masks[key] = (mask, causal)
        return hit

    def table(self, key: Hashable, make: Callable[[], object]) -> object:
        """A per-forward table (RoPE's cos/sin, ALiBi's bias), made on first use and shared by every layer
        whose scheme gives the same ``key``."""
        hit = self._tables.get(key)
        if hit is None:
            hit = self._tables[key] = make()
        return hit


def build_context(
    *,
    b: int,
    t: int,
    s: int,
    device: torch.device | str | None,
    past: int = 0,
    positions: torch.Tensor | None = None,
    padding: torch.Tensor | None = None,
    hf_mask: bool = False,
    mask: torch.Tensor | None = None,
    is_causal: bool = False,
    cross: bool = False,
    bias: torch.Tensor | None = None,
    cache_positions: torch.Tensor | None = None,
    shared_positions: torch.Tensor | None = None,
    slots: torch.Tensor | None = None,
) -> AttentionContext:
    """The one place a forward's mask and positions are combined, from inputs the callers have checked (each
    under its own argument's name: :func:`hf_padding`, :func:`key_padding`, :func:`check_positions`,
    ``masks.as_attention_mask``).

    ``padding (B, S)``, True on real keys, and the attention ``mask`` ``(B|1, H|1, T, S)`` are ANDed into one
    boolean mask. ``hf_mask`` gives the padding Hugging Face's meaning (an ``attention_mask``): the query
    positions are counted from it, so a left-padded prompt sees the positions of the prompt alone, and one without
    padding is dropped, as in Hugging Face's masking_utils. ``positions`` (default ``past + arange(T)``, or
    counted) are ``(B|1, T)``; ``shared_positions`` are another context's (a decoder's memory context shares its
    self-attention context's)."""
    if padding is not None and hf_mask:
        # a mask with no padding is no mask (as HF's masking_utils): SDPA may then take its fused causal path
        keep = torch.compiler.is_compiling() or not bool(padding.all())
        counted, padding = padding, (padding if keep else None)
    else:
        counted = None
    if padding is not None:
        mask = padding[:, None, None, :] if mask is None else mask & padding[:, None, None, :]  # (B|1, H|1, T, S)
    if shared_positions is None:
        positions = query_positions(t, past, device, given=positions, counted=counted, slots=slots)
    else:
        positions = shared_positions
    return AttentionContext(
        b=b,
        t=t,
        s=s,
        positions=positions,
        mask=mask,
        is_causal=is_causal,
        past=past,
        cross=cross,
        bias=bias,
        cache_positions=cache_positions,
        slots=slots,
    )
