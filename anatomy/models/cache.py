"""``ModelCache``: a model's per-layer KV caches behind the methods Hugging Face users call on ``DynamicCache``.

    out = model(ids, use_cache=True)               # out.past_key_values is a ModelCache
    out.past_key_values.get_seq_length()           # tokens seen so far
    k, v = out.past_key_values[0]                  # layer 0: (B, Hkv, S, Dh) each, keys after RoPE
    out.past_key_values.layers[0].keys             # the same tensor, by transformers 5's names
    legacy = out.past_key_values.to_legacy_cache() # ((k, v), ...) per layer; (k, v, cross_k, cross_v) for seq2seq
    model(nxt, past_key_values=out.past_key_values, use_cache=True)

A forward also accepts the legacy tuples and a transformers ``Cache`` (``DynamicCache``, ``EncoderDecoderCache``):
they are read into our caches for that call, and a transformers cache gets the call's new entries appended and
comes back as ``past_key_values``, as it would from an HF model (the copy costs O(S) per call). Each layer is one
``anatomy.components.kv_cache.KVCache``; a seq2seq layer is a ``(self, cross)`` pair of them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, cast

import torch

from anatomy.components.kv_cache import KVCache
from anatomy.components.masks import positions_from_mask

# one layer's caches: a KVCache (decoder-only) or a (self, cross) pair (seq2seq)
CacheLayer = KVCache | tuple[KVCache, KVCache]
# a layer's entries as tensors: (k, v) or (k, v, cross_k, cross_v); None where a cache is still empty
LayerEntries = tuple[torch.Tensor | None, ...]


def _self(layer: CacheLayer) -> KVCache:
    return layer[0] if isinstance(layer, tuple) else layer


class ModelCache:
    """One ``KVCache`` (decoder-only) or ``(self, cross)`` pair (seq2seq) per layer; mutated in place by forwards."""

    def __init__(self, kv_caches: list[Any]) -> None:
        self.kv_caches = kv_caches

    @property
    def layers(self) -> list[Any]:
        return self.kv_caches

    @property
    def is_encoder_decoder(self) -> bool:
        return bool(self.kv_caches) and isinstance(self.kv_caches[0], tuple)

    @property
    def self_attention_cache(self) -> ModelCache:
        return ModelCache([_self(layer) for layer in self.kv_caches])

    @property
    def cross_attention_cache(self) -> ModelCache:
        if not self.is_encoder_decoder:
            raise AttributeError("a decoder-only cache has no cross-attention cache")
        return ModelCache([layer[1] for layer in self.kv_caches])

    def __len__(self) -> int:
        return len(self.kv_caches)

    def __getitem__(self, i: int) -> LayerEntries:
        layer = self.kv_caches[i]
        if isinstance(layer, tuple):
            return layer[0].k, layer[0].v, layer[1].k, layer[1].v
        return layer.k, layer.v

    def __iter__(self) -> Iterator[LayerEntries]:
        return (self[i] for i in range(len(self)))

    def __repr__(self) -> str:
        return f"ModelCache(layers={len(self)}, seq_length={self.get_seq_length()})"

    def get_seq_length(self, layer_idx: int = 0) -> int:
        """Tokens this layer has seen (a sliding-window layer holds fewer; this counts them all, like HF)."""
        return _self(self.kv_caches[layer_idx]).seen if self.kv_caches else 0

    def to_legacy_cache(self) -> tuple[LayerEntries, ...]:
        return tuple(self)

    @classmethod
    def from_legacy_cache(
        cls, past: Iterable[Iterable[torch.Tensor]], *, template: list[Any], attention_mask: torch.Tensor | None = None
    ) -> ModelCache:
        """Fill ``template`` (empty caches from ``model.new_caches()``) with ``past``: per layer ``(k, v)`` or
        ``(k, v, cross_k, cross_v)``, each ``(B, Hkv, S, Dh)``; key positions are counted from the mask."""
        past = list(past)
        if len(past) != len(template):
            raise ValueError(f"past_key_values must hold one entry per layer ({len(template)}), got {len(past)}")
        for i, (entry, layer) in enumerate(zip(past, template)):
            entry = tuple(entry)
            if len(entry) not in (2, 4) or (len(entry) == 4) != isinstance(layer, tuple):
                expected = "(k, v, cross_k, cross_v)" if isinstance(layer, tuple) else "(k, v)"
                raise ValueError(f"past_key_values[{i}] must be {expected} tensors, got {len(entry)} items")
            _fill(_self(layer), entry[0], entry[1], attention_mask)
            if isinstance(layer, tuple):
                _fill(layer[1], entry[2], entry[3], None)
        return cls(template)

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        for layer in self.kv_caches:
            for cache in layer if isinstance(layer, tuple) else (layer,):
                cache.batch_select(indices)

    def reorder_cache(self, beam_idx: torch.Tensor) -> None:
        """Beam search: row ``i`` continues from row ``beam_idx[i]``."""
        self.batch_select_indices(beam_idx)

    def batch_repeat_interleave(self, repeats: int) -> None:
        b = next((len(k) for k in (_self(c).k for c in self.kv_caches) if k is not None), None)
        if b is not None:
            self.batch_select_indices(torch.arange(b).repeat_interleave(repeats))

    def to_hf(self) -> Any:
        """The same entries in a transformers ``DynamicCache`` (``EncoderDecoderCache`` for seq2seq)."""
        from transformers import DynamicCache, EncoderDecoderCache

        if not self.is_encoder_decoder:
            return DynamicCache(self.to_legacy_cache())
        return EncoderDecoderCache(DynamicCache([e[:2] for e in self]), DynamicCache([e[2:] for e in self]))


def _fill(
    cache: KVCache,
    k: torch.Tensor | None,
    v: torch.Tensor | None,
    attention_mask: torch.Tensor | None,
    seen: int | None = None,
) -> None:
    if k is None or k.numel() == 0:
        return
    s = k.shape[-2]
    seen = s if seen is None else seen
    if attention_mask is not None and attention_mask.shape[-1] >= seen:
        positions = positions_from_mask(attention_mask.bool())[:, seen - s : seen]  # (B, S)
    else:
        positions = torch.arange(seen - s, seen, device=k.device)[None]  # (1, S)
    cache.update(k, cast(torch.Tensor, v), positions)  # the values come with the keys (HF layers, legacy pairs)
    cache.seen = seen


def _ours(layer: object) -> bool:
    return isinstance(layer, KVCache) or (
        isinstance(layer, tuple) and len(layer) == 2 and all(isinstance(c, KVCache) for c in layer)
    )


def _is_hf_cache(obj: object) -> bool:
    return any(c.__module__.startswith("transformers.") and c.__name__ == "Cache" for c in type(obj).__mro__)


def _hf_layers(cache: Any) -> list[tuple[torch.Tensor | None, torch.Tensor | None, int]]:
    """``[(k, v, seen), ...]`` of a transformers DynamicCache (its layers' ``keys`` / ``values``)."""
    out: list[tuple[torch.Tensor | None, torch.Tensor | None, int]] = []
    for i, layer in enumerate(cache.layers):
        keys = getattr(layer, "keys", None)
        out.append((keys, getattr(layer, "values", None), cache.get_seq_length(i) if keys is not None else 0))
    return out


def open_cache(
    model: Any, past_key_values: Any, kv_caches: list[Any] | None, use_cache: bool, attention_mask: torch.Tensor | None
) -> tuple[list[Any] | None, object]:
    """The forward's cache: ``(kv_caches or None, given)``. ``given`` is the cache object to hand back: the
    ``ModelCache`` or the transformers cache that was passed (``close_cache`` writes the call's new entries into
    the latter), ``None`` otherwise."""
    if past_key_values is not None and kv_caches is not None:
        raise ValueError("give past_key_values or kv_caches, not both (they are two names for one cache)")
    if past_key_values is None:
        return (model.new_caches() if use_cache and kv_caches is None else kv_caches), None
    if isinstance(past_key_values, ModelCache):
        return past_key_values.kv_caches, past_key_values
    if isinstance(past_key_values, (list, tuple)) and past_key_values and all(map(_ours, past_key_values)):
        return list(past_key_values), None  # our own per-layer caches (what kv_caches= takes)
    template = model.new_caches()
    if _is_hf_cache(past_key_values):
        if hasattr(past_key_values, "self_attention_cache"):  # EncoderDecoderCache
            self_layers = _hf_layers(past_key_values.self_attention_cache)
            cross_layers = _hf_layers(past_key_values.cross_attention_cache)
        else:
            self_layers, cross_layers = _hf_layers(past_key_values), None
        if self_layers and len(self_layers) != len(template):
            raise ValueError(f"past_key_values has {len(self_layers)} layers; this model has {len(template)}")
        for i, layer in enumerate(template):
            if i >= len(self_layers):
                break
            k, v, seen = self_layers[i]
            _fill(_self(layer), k, v, attention_mask, seen)
            if cross_layers is not None and isinstance(layer, tuple) and i < len(cross_layers):
                _fill(layer[1], cross_layers[i][0], cross_layers[i][1], None)
        return template, past_key_values
    if isinstance(past_key_values, (tuple, list)):
        return ModelCache.from_legacy_cache(
            past_key_values, template=template, attention_mask=attention_mask
        ).kv_caches, None
    raise TypeError(
        f"past_key_values must be a ModelCache, a transformers Cache or legacy ((k, v), ...) tuples, "
        f"got {type(past_key_values).__name__}"
    )


def close_cache(kv_caches: list[Any] | None, foreign: Any, t: int) -> Any:
    """What ``past_key_values`` returns: the ``ModelCache`` given (or a new one), or the given transformers cache
    with the last ``t`` (self-attention) entries appended, and on its first call the cross-attention entries."""
    if kv_caches is None:
        return None
    if foreign is None:
        return ModelCache(kv_caches)
    if isinstance(foreign, ModelCache):
        return foreign
    seq2seq = hasattr(foreign, "self_attention_cache")
    target = foreign.self_attention_cache if seq2seq else foreign
    for i, layer in enumerate(kv_caches):
        cache = _self(layer)
        assert cache.k is not None and cache.v is not None  # the forward has just appended to it
        target.update(cache.k[..., -t:, :], cache.v[..., -t:, :], i)
        if seq2seq and foreign.cross_attention_cache.get_seq_length(i) == 0:
            foreign.cross_attention_cache.update(layer[1].k, layer[1].v, i)
    return foreign
