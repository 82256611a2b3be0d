"""``GenerateOutput``: what ``generate(..., return_dict_in_generate=True)`` returns, as HF's
``GenerateDecoderOnlyOutput``: attributes and keys ``sequences``, ``scores``, ``logits``, ``cache``.

    sequences  (B', T + n)   the prompt (or the decoder start) then the new tokens, as without the dict
    scores     n x (B', V)   with output_scores=True: each step's scores after every processor (None otherwise)
    logits     n x (B', V)   with output_logits=True: each step's raw float32 logits (None otherwise)
    cache      the KV cache after the last step (a ModelCache, or the cache given as past_key_values), to go on
               from (``past_key_values``: transformers 5's older name, as on HF's output)

``out["sequences"]``, ``out.keys()`` and ``out.to_tuple()`` list only what is not None, as HF's ``ModelOutput``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, fields
from typing import Any

import torch


@dataclass
class GenerateOutput:
    sequences: torch.Tensor
    scores: tuple[torch.Tensor, ...] | None = None
    logits: tuple[torch.Tensor, ...] | None = None
    cache: Any = None

    @property
    def past_key_values(self) -> Any:
        return self.cache

    def keys(self) -> list[str]:
        return [f.name for f in fields(self) if getattr(self, f.name) is not None]

    def __getitem__(self, key: str | int) -> Any:
        if isinstance(key, int):
            return self.to_tuple()[key]
        if key not in self.keys():
            raise KeyError(f"{key!r}: this output holds {', '.join(self.keys())}")
        return getattr(self, key)

    def __contains__(self, key: object) -> bool:
        return key in self.keys()

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def to_tuple(self) -> tuple[Any, ...]:
        return tuple(getattr(self, k) for k in self.keys())
