"""What models return: dataclasses with Hugging Face's field names, indexable like HF's ``ModelOutput``.

``out.logits`` is the usual way in. As in HF, ``out[0]`` indexes the fields that are not ``None`` in HF's order
(``loss`` first when labels were given, else ``logits``), ``out["logits"]`` reads a field by name and
``out.to_tuple()`` gives them all; ``return_dict=False`` on a forward returns that tuple. Fields HF's class does
not have (``last_hidden_state`` of an LM, ``pooled`` of a classifier) are attributes only: they are left out of
the tuple, so ``out[i]`` means what it means in HF.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, ClassVar, TypedDict, cast

import torch

if TYPE_CHECKING:
    from _typeshed import DataclassInstance


class OutputFlags(TypedDict, total=False):
    """Hugging Face's output switches, which every model's forward takes as ``**flags: Unpack[OutputFlags]`` (as
    transformers 5 passes them in ``**kwargs``): the attention weights of every layer, the hidden states of every
    block, and ``return_dict=False`` for ``out.to_tuple()``. ``None`` is the default, as in HF."""

    output_attentions: bool | None
    output_hidden_states: bool | None
    return_dict: bool | None


def output_flags(model: object, flags: Mapping[str, object]) -> tuple[bool, bool, bool]:
    """``(output_attentions, output_hidden_states, return_dict)`` of a forward's ``**flags`` (defaults False, False,
    True); a keyword the forward does not take gets Python's one line."""
    for name in flags:
        if name not in OutputFlags.__annotations__:
            raise TypeError(f"{type(model).__name__}.forward() got an unexpected keyword argument {name!r}")
    attentions, hidden, as_dict = (flags.get(n) for n in ("output_attentions", "output_hidden_states", "return_dict"))
    return bool(attentions), bool(hidden), as_dict is None or bool(as_dict)


class ModelOutput:
    """HF ``ModelOutput`` behaviour over a dataclass: positional, slice and key indexing of the set fields."""

    _extra: ClassVar[tuple[str, ...]] = ()  # our fields that HF's class lacks: attribute access only

    def keys(self) -> list[str]:
        instance = cast("DataclassInstance", self)  # every subclass is a @dataclass
        return [f.name for f in fields(instance) if f.name not in self._extra and getattr(self, f.name) is not None]

    def values(self) -> list[Any]:
        return [getattr(self, k) for k in self.keys()]

    def items(self) -> list[tuple[str, Any]]:
        return [(k, getattr(self, k)) for k in self.keys()]

    def to_tuple(self) -> tuple[Any, ...]:
        return tuple(self.values())

    def __getitem__(self, key: str | int | slice) -> Any:
        if isinstance(key, str):
            if key not in self.keys():
                raise KeyError(f"{type(self).__name__} has no field {key!r} set; set fields: {', '.join(self.keys())}")
            return getattr(self, key)
        return self.to_tuple()[key]

    def __contains__(self, key: object) -> bool:
        return key in self.keys()

    def __iter__(self) -> Iterator[str]:  # like HF's (an OrderedDict): iterating gives the keys
        return iter(self.keys())

    def __len__(self) -> int:
        return len(self.keys())


class CachedOutput(ModelOutput):
    """The two other names of an output's ``past_key_values`` field (LM and seq2seq outputs)."""

    past_key_values: Any

    @property
    def kv_caches(self) -> list[Any] | None:
        """The per-layer ``KVCache`` list (the pre-HF name; the same objects as ``past_key_values``); ``None`` for
        none or a foreign cache."""
        return getattr(self.past_key_values, "kv_caches", None)

    @property
    def cache(self) -> Any:
        """transformers 5 calls ``past_key_values`` ``cache``: the same object."""
        return self.past_key_values


@dataclass
class EncoderOutput(ModelOutput):
    last_hidden_state: torch.Tensor | None = None  # (B, T, D)
    pooler_output: torch.Tensor | None = None  # (B, D) BERT's tanh(Linear(first token)), when built with pooler
    hidden_states: tuple[torch.Tensor, ...] | None = None  # embeddings + one per layer, each (B, T, D)
    attentions: tuple[torch.Tensor, ...] | None = None  # per layer (B, H, T, T)


@dataclass
class LMOutput(CachedOutput):
    loss: torch.Tensor | None = None
    logits: torch.Tensor | None = None  # (B, T, V)
    past_key_values: Any = None  # a ModelCache (or the HF cache that was passed in)
    hidden_states: tuple[torch.Tensor, ...] | None = None  # embeddings + one per layer (the last one normed)
    attentions: tuple[torch.Tensor, ...] | None = None  # per layer (B, H, T, S)
    last_hidden_state: torch.Tensor | None = None  # (B, T, D), after the final norm

    _extra: ClassVar[tuple[str, ...]] = ("last_hidden_state",)


@dataclass
class Seq2SeqOutput(CachedOutput):
    loss: torch.Tensor | None = None
    logits: torch.Tensor | None = None  # (B, T, V)
    past_key_values: Any = None  # a ModelCache of (self, cross) pairs
    decoder_hidden_states: tuple[torch.Tensor, ...] | None = None
    decoder_attentions: tuple[torch.Tensor, ...] | None = None
    cross_attentions: tuple[torch.Tensor, ...] | None = None
    encoder_last_hidden_state: torch.Tensor | None = None  # (B, S, D)
    encoder_hidden_states: tuple[torch.Tensor, ...] | None = None
    encoder_attentions: tuple[torch.Tensor, ...] | None = None


@dataclass
class ClassifierOutput(ModelOutput):
    loss: torch.Tensor | None = None
    logits: torch.Tensor | None = None  # (B, num_labels)
    hidden_states: tuple[torch.Tensor, ...] | None = None
    attentions: tuple[torch.Tensor, ...] | None = None
    pooled: torch.Tensor | None = None  # (B, D)

    _extra: ClassVar[tuple[str, ...]] = ("pooled",)
