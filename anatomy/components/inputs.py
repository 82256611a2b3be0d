"""``attention_inputs``: the context of a layer called on its own, from the caller's raw arguments.

An attention layer, a block and a stack take their masks and positions in one form, the forward's
:class:`~anatomy.components.context.AttentionContext` (``ctx``), as Hugging Face's layers take the masks and position
embeddings their model prepared. A model builds it once per forward (``TransformerStack.attention_context``); a call
of one layer on its own builds it here, from the arguments a user knows, each checked under its own name::

    ctx = attention_inputs(attn, x, is_causal=True, key_padding_mask=keep)   # keep: (B, S), True on real keys
    out, weights = attn(x, ctx, need_weights=True)

``ctx=None`` (``attn(x)``, ``block(x)``) is the plain call: no mask, the layer's own causal default, positions after
what the cache holds. A layer given one of the removed keywords (``mask=``, ``is_causal=``, ...) says this form in
one line (:func:`refuse_keywords`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NoReturn

import torch
from torch import nn

from anatomy.components.context import (
    AnyCache,
    AttentionContext,
    build_context,
    cache_seen,
    check_positions,
    key_padding,
)
from anatomy.components.kv_cache import StaticKVCache
from anatomy.components.masks import as_attention_mask
from anatomy.shapes import check_hidden

REMOVED = {  # a layer's keywords of before, and the argument of attention_inputs that takes their place
    "mask": "mask",
    "is_causal": "is_causal",
    "key_padding_mask": "key_padding_mask",
    "positions": "positions",
    "attn_bias": "attn_bias",
    "memory_mask": "memory_mask",
    "attn_mask": "mask",
    "memory_key_padding_mask": "memory_key_padding_mask",
    "memory_attn_mask": "memory_mask",
}


@dataclass(frozen=True)
class Given:
    """A standalone call's raw inputs, under the names the caller gave them to :func:`attention_inputs`: every check
    below names the field it reads."""

    mask: torch.Tensor | None = None
    is_causal: bool | None = None
    key_padding_mask: torch.Tensor | None = None
    positions: torch.Tensor | None = None
    attn_bias: torch.Tensor | None = None
    memory_mask: torch.Tensor | None = None
    memory_key_padding_mask: torch.Tensor | None = None
    kv_cache: Any = None

    def keys(self, b: int, heads: int, t: int, s: int) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """``mask`` (broadcast to ``(B|1, H|1, T, S)``) and ``key_padding_mask`` ``(B, S)``, checked."""
        mask = None if self.mask is None else as_attention_mask(self.mask, b, heads, t, s, name="mask")
        return mask, key_padding("key_padding_mask", self.key_padding_mask, b, s)

    def memory_keys(self, b: int, heads: int, t: int, m: int) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """``memory_mask`` (broadcast to ``(B|1, H|1, T, M)``) and ``memory_key_padding_mask`` ``(B, M)``."""
        mask = self.memory_mask
        checked = None if mask is None else as_attention_mask(mask, b, heads, t, m, name="memory_mask")
        return checked, key_padding("memory_key_padding_mask", self.memory_key_padding_mask, b, m)

    def query_positions(self, b: int, t: int) -> torch.Tensor | None:
        return check_positions("positions", self.positions, b, t)

    def bias(self, b: int, heads: int, t: int, s: int) -> torch.Tensor | None:
        """``attn_bias``: a float score bias broadcastable to ``(B, H, T, S)``."""
        bias = self.attn_bias
        if bias is None:
            return None
        if not isinstance(bias, torch.Tensor) or not bias.is_floating_point():
            what = f"dtype {bias.dtype}" if isinstance(bias, torch.Tensor) else type(bias).__name__
            raise TypeError(f"attn_bias must be a float tensor broadcastable to (B, H, T, S), got {what}")
        want = (b, heads, t, s)
        if bias.dim() > 4 or any(g not in (1, w) for g, w in zip(bias.shape[::-1], want[::-1])):
            raise ValueError(
                f"attn_bias of shape {tuple(bias.shape)} does not broadcast to (B={b}, H={heads}, T={t}, S={s})"
            )
        return bias

    def refuse_memory(self, layer: object, why: str) -> None:
        """Refuse the memory's masks on a layer that has no memory to mask."""
        for name in ("memory_mask", "memory_key_padding_mask"):
            if getattr(self, name) is not None:
                raise ValueError(f"{name} masks an encoder memory; {type(layer).__name__} {why}")


def attention_inputs(
    layer: nn.Module,
    x: torch.Tensor,
    memory: torch.Tensor | None = None,
    *,
    mask: torch.Tensor | None = None,
    is_causal: bool | None = None,
    key_padding_mask: torch.Tensor | None = None,
    positions: torch.Tensor | None = None,
    attn_bias: torch.Tensor | None = None,
    memory_mask: torch.Tensor | None = None,
    memory_key_padding_mask: torch.Tensor | None = None,
    kv_cache: Any = None,
) -> AttentionContext:
    """The :class:`AttentionContext` of ``layer(x, ...)`` called on its own (a ``MultiHeadAttention``, a block or a
    stack), built as a model builds its forward's and checked under these arguments' names.

    ``x: (B, T, D)``; ``memory: (B, M, D)`` the encoder memory (a cross-attention's keys, a decoder block's or
    stack's memory). ``mask`` is boolean, True = may attend, broadcastable to ``(B, H, T, S)`` (a 2-D mask is
    ``(T, S)``, even when B == T); ``key_padding_mask (B, S)`` is True on real keys (``nn.MultiheadAttention``'s
    opposite sense; ``masks.from_torch_nn`` flips it); given both, they are combined. ``is_causal`` (default: the
    layer's, causal for ``DecoderBlock`` and ``DecoderStack``) adds the causal rule, bottom-right aligned when a cache
    makes S > T. ``positions (B|1, T)`` are the query positions (default: ``arange(T)`` after every entry the cache
    has seen). ``attn_bias`` is a float score bias broadcastable to ``(B, H, T, S)`` (T5's, say).
    ``memory_mask`` / ``memory_key_padding_mask`` mask the memory for the cross-attention of a block or stack (a
    ``MultiHeadAttention`` over a memory takes them as ``mask`` / ``key_padding_mask``: its keys are the memory's).
    ``kv_cache`` is the cache the call will get: a ``KVCache`` (attention), a cache or ``(self, cross)`` pair
    (block), one per block (stack)."""
    build = getattr(layer, "standalone_context", None)
    if not callable(build):
        raise TypeError(
            "attention_inputs builds the context of a MultiHeadAttention, a block or a stack, "
            f"got {type(layer).__name__}"
        )
    given = Given(
        mask=mask,
        is_causal=is_causal,
        key_padding_mask=key_padding_mask,
        positions=positions,
        attn_bias=attn_bias,
        memory_mask=memory_mask,
        memory_key_padding_mask=memory_key_padding_mask,
        kv_cache=kv_cache,
    )
    ctx: AttentionContext = build(x, memory, given)
    return ctx


def check_memory(name: str, memory: torch.Tensor, x: torch.Tensor, d_model: int) -> None:
    """The memory a cross-attention reads, given as the caller's argument ``name``: ``(B, S, D)`` with ``x``'s B."""
    check_hidden(name, memory, d_model)
    if memory.shape[0] != x.shape[0]:
        raise ValueError(f"{name} must have batch size B={x.shape[0]} like x, got shape {tuple(memory.shape)}")


def own_context(
    x: torch.Tensor,
    memory: torch.Tensor | None,
    given: Given,
    *,
    heads: int,
    d_model: int,
    cache: AnyCache | None,
    is_causal: bool,
    memory_masks: bool = False,
) -> AttentionContext:
    """The context of one attention over ``x`` (self) or over ``memory`` (cross; checked by the caller,
    :func:`check_memory`), ``cache`` included: the key count ``S``, positions after every entry the cache saw,
    ``given``'s masks over those keys (the memory's own masks when ``memory_masks``: a block's cross-attention) and its
    positions and bias."""
    check_hidden("x", x, d_model)
    b, t, _ = x.shape
    past, cross = 0, memory is not None
    if memory is not None:
        s = len(cache) if cache is not None and len(cache) else memory.shape[1]
    else:
        past = cache_seen(None if cache is None else [cache], t)  # positions continue after every cached entry
        s = past + t
    mask, padding = given.memory_keys(b, heads, t, s) if memory_masks else given.keys(b, heads, t, s)
    static = cache if isinstance(cache, StaticKVCache) and not cross else None
    return build_context(
        b=b,
        t=t,
        s=s,
        device=x.device,
        past=past,
        mask=mask,
        padding=padding,
        positions=None if memory_masks else given.query_positions(b, t),
        is_causal=is_causal,
        cross=cross,
        bias=None if memory_masks else given.bias(b, heads, t, s),
        cache_positions=None if cache is None or cross else (cache.positions if static is None else static.pos_buf),
        slots=None if static is None else static.slots(t),
    )


def refuse_keywords(layer: object, call: str, inputs: str, extra: Mapping[str, object]) -> NoReturn:
    """The one-line error of a layer given keywords its forward does not take: the removed mask/position keywords
    say the form that replaced them. ``call`` is the layer's call with ``{ctx}`` where the context goes,
    ``inputs`` the first arguments of :func:`attention_inputs` (``"attn, x"``)."""
    name = type(layer).__name__
    old = [k for k in extra if k in REMOVED]
    if not old:
        raise TypeError(f"{name}.forward() got an unexpected keyword argument {next(iter(extra))!r}")
    new = [REMOVED[k] for k in old]
    said = ", ".join(k if k == n else f"{k} (now {n})" for k, n in zip(old, new))
    args = ", ".join(f"{n}=..." for n in new)
    raise TypeError(f"{name} takes its {said} through ctx: {call.format(ctx=f'attention_inputs({inputs}, {args})')}")
