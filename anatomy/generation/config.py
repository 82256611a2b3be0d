"""``GenerationConfig``: ``generate``'s options in one object, with Hugging Face's names and HF's precedence.

    model.generation_config                  # the model's defaults: its bos/eos/pad tokens (ModelConfig)
    generate(model, ids, generation_config=g, max_new_tokens=8)

What runs is, as in HF's ``generate``: the keyword arguments, over the options the given ``generation_config`` sets
(not None), over the model's ``generation_config``. ``generation_config`` may be ours or a ``transformers``
``GenerationConfig`` (read through ``to_dict()``); an option of HF's that ours does not implement (``typical_p``,
``num_beam_groups``, ...) is refused by name when it is set, never ignored.
"""

from __future__ import annotations

import copy
from typing import Any

# generate's options (HF's names), with the value that means "not set"
OPTIONS: dict[str, Any] = {
    "max_new_tokens": None, "max_length": None, "min_new_tokens": None, "min_length": None,
    "do_sample": None, "num_beams": None, "temperature": None, "top_k": None, "top_p": None, "min_p": None,
    "repetition_penalty": None, "length_penalty": None, "early_stopping": None, "num_return_sequences": None,
    "no_repeat_ngram_size": None, "bad_words_ids": None, "suppress_tokens": None, "stop_strings": None,
    "bos_token_id": None, "eos_token_id": None, "pad_token_id": None, "decoder_start_token_id": None,
    "return_dict_in_generate": None, "output_scores": None, "output_logits": None, "use_cache": None,
}
# what "not set" means once everything is merged (HF's global defaults where ours has none of its own)
DEFAULTS: dict[str, Any] = {"do_sample": False, "num_beams": 1, "num_return_sequences": 1, "use_cache": True,
                            "return_dict_in_generate": False, "output_scores": False, "output_logits": False}
# HF GenerationConfig fields that change nothing here at these values (their defaults, or bookkeeping)
_HARMLESS: dict[str, tuple[Any, ...]] = {
    "output_attentions": (False, None), "output_hidden_states": (False, None), "transformers_version": (),
    "_from_model_config": (), "cache_implementation": (None,), "cache_config": (None,), "use_mtp": (None, False),
    "typical_p": (None, 1.0), "epsilon_cutoff": (None, 0.0), "eta_cutoff": (None, 0.0),
    "encoder_repetition_penalty": (None, 1.0), "encoder_no_repeat_ngram_size": (None, 0),
    "num_beam_groups": (None, 1), "diversity_penalty": (None, 0.0), "renormalize_logits": (None, False),
    "remove_invalid_values": (None, False), "guidance_scale": (None, 1.0), "max_time": (None,),
}


class GenerationConfig:
    """HF-named generation options; an unset option is None. ``GenerationConfig(max_new_tokens=8, do_sample=True)``,
    ``update(**kw)``, ``to_dict()``, ``to_diff_dict()`` (only the set options) and attribute access, as HF's."""

    def __init__(self, **options: Any) -> None:
        for name, value in OPTIONS.items():
            setattr(self, name, value)
        self.update(**options)

    def update(self, **options: Any) -> None:
        unknown = sorted(set(options) - set(OPTIONS))
        if unknown:
            raise ValueError(f"unknown generation option(s) {', '.join(unknown)}; known: {', '.join(OPTIONS)}")
        for name, value in options.items():
            setattr(self, name, value)

    def to_dict(self) -> dict[str, Any]:
        return {name: copy.deepcopy(getattr(self, name)) for name in OPTIONS}

    def to_diff_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.to_dict().items() if v is not None}

    def __repr__(self) -> str:
        return f"GenerationConfig({', '.join(f'{k}={v!r}' for k, v in self.to_diff_dict().items())})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, GenerationConfig) and self.to_dict() == other.to_dict()

    @classmethod
    def from_model_config(cls, config: Any) -> GenerationConfig:
        """The defaults of a model: its special tokens (bos, eos, pad; an encoder-decoder's decoder start)."""
        eos = getattr(config, "eos_token_id", None)
        out = cls(bos_token_id=getattr(config, "bos_token_id", None),
                  eos_token_id=list(eos) if isinstance(eos, tuple) else eos,
                  pad_token_id=getattr(config, "pad_token_id", None))
        if getattr(config, "architecture", None) == "seq2seq":
            out.decoder_start_token_id = config.pad_token_id
        return out


def read_options(generation_config: Any, *, where: str = "generation_config") -> dict[str, Any]:
    """The options a generation config sets (not None): ours, a ``transformers.GenerationConfig`` or a dict. An
    HF option we do not implement, set to a value that would change the result, is a ``ValueError`` naming it."""
    if generation_config is None:
        return {}
    if isinstance(generation_config, dict):
        values = dict(generation_config)
    elif callable(getattr(generation_config, "to_dict", None)):
        values = generation_config.to_dict()
    else:
        raise ValueError(f"{where} must be a GenerationConfig (ours or transformers') or a dict, got "
                         f"{type(generation_config).__name__}")
    out: dict[str, Any] = {}
    refused = []
    for name, value in values.items():
        if name in OPTIONS:
            if value is not None:
                out[name] = value
        elif name in _HARMLESS:
            if _HARMLESS[name] and value not in _HARMLESS[name]:
                refused.append(f"{name}={value!r}")
        elif value not in (None, False, 0, [], {}):
            refused.append(f"{name}={value!r}")
    if refused:
        raise ValueError(f"{where} sets option(s) anatomy's generate does not implement: {', '.join(refused)}; "
                         f"it implements: {', '.join(OPTIONS)}")
    return out


def resolve(model_config: Any, generation_config: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
    """Every option's value, HF's precedence: ``kwargs`` (even None) over ``generation_config``'s set options over
    the model's defaults, then ``DEFAULTS``."""
    unknown = sorted(set(kwargs) - set(OPTIONS))
    if unknown:
        raise TypeError(f"generate got an unexpected keyword argument {', '.join(map(repr, unknown))}; the HF "
                        f"options it takes: {', '.join(OPTIONS)}")
    merged = dict(OPTIONS)
    merged.update(read_options(model_config, where="model.generation_config"))
    merged.update(read_options(generation_config))
    merged.update(kwargs)
    for name, value in DEFAULTS.items():
        if merged[name] is None:
            merged[name] = value
    return merged
