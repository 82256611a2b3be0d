"""``generate(..., past_key_values=cache)``: go on from a cache, as a chat loop does with Hugging Face's ``generate``.

    out = model.generate(ids, max_new_tokens=32, return_dict_in_generate=True)
    ids = torch.cat([out.sequences, next_turn], dim=1)                 # every token so far, then the new ones
    out = model.generate(ids, past_key_values=out.past_key_values, max_new_tokens=32, return_dict_in_generate=True)

As in HF, ``input_ids`` holds the whole conversation and the cache its first ``S`` tokens (``get_seq_length()``);
only the tokens after them run through the model (the prefill), then decoding goes on as usual. The processors
see every token (a repetition penalty counts the earlier turns), and ``attention_mask`` covers every token too.
The cache is ours (a ``ModelCache``, as ``out.past_key_values`` returns it) or a transformers ``DynamicCache``
(an empty one too, as HF's chat example passes): it is extended in place, and the same object comes back in
``out.past_key_values``; afterwards it holds every token but the last generated one (that one was never fed),
which is what HF's holds. Decoder-only models, one output per prompt; beams, ``num_return_sequences > 1``, an
encoder-decoder model or a legacy tuple with a cache are refused by name.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from anatomy.generation.decoding import CachedDecoding
from anatomy.models.cache import ModelCache, _is_hf_cache, close_cache, open_cache


def check_continuation(model: nn.Module, past_key_values: Any, *, copies: int, embeds: bool) -> None:
    """What cannot go on from a cache here, refused by name before anything runs."""
    if getattr(model, "is_encoder_decoder", False):
        raise ValueError(
            "past_key_values with an encoder-decoder model: generate goes on from a cache for decoder-only "
            "models; give the whole source again"
        )
    if not (isinstance(past_key_values, ModelCache) or _is_hf_cache(past_key_values)):
        raise TypeError(
            "generate's past_key_values must be a ModelCache (out.past_key_values) or a transformers Cache "
            f"(DynamicCache), got {type(past_key_values).__name__}; a legacy ((k, v), ...) tuple: "
            "ModelCache.from_legacy_cache(past, template=model.new_caches())"
        )
    if copies > 1:
        raise ValueError(
            f"past_key_values with num_beams or num_return_sequences > 1 ({copies} rows per prompt): go on from a "
            "cache with one output per prompt"
        )
    if embeds:
        raise ValueError("past_key_values with inputs_embeds: go on from a cache with input_ids")


class ContinuedDecoding(CachedDecoding):
    """``CachedDecoding`` whose cache already holds the first ``cached`` tokens of ``input_ids``."""

    def __init__(self, *args: Any, past_key_values: Any, **options: Any) -> None:
        """``args`` and ``options``: ``CachedDecoding`` 's (model, input_ids, mask, max_new_tokens; fast, compile)."""
        super().__init__(*args, continued=True, **options)
        caches, self.given = open_cache(self.model, past_key_values, None, True, self.mask)
        assert caches is not None  # a cache was given
        self.cached = ModelCache(caches).get_seq_length()
        rows, t = self.prefix.shape  # input_ids (a decoder-only model's prefix)
        if self.cached >= t:
            raise ValueError(
                f"past_key_values already holds {self.cached} tokens and input_ids has {t}: give input_ids that "
                "extend what the cache holds (every token so far, then at least one new one)"
            )
        held = next((c.k.shape[0] for c in caches if getattr(c, "k", None) is not None), None)
        if held is not None and held != rows:
            raise ValueError(f"past_key_values holds a batch of {held} rows, input_ids has {rows}")
        self.caches = caches

    def prefill(self) -> torch.Tensor:
        return self._logits(self.prefix[:, self.cached :], step=False)  # only what the cache does not hold

    def handed_back(self) -> Any:
        """The cache object that was given, now holding every token fed (ours in place; HF's appended to)."""
        fed = ModelCache(self.caches).get_seq_length() - self.cached
        return close_cache(self.caches, self.given, fed) if fed else self.given
