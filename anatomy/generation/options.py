"""``generate``'s options checked together: a bad value, or two options that cannot run together, is one
``ValueError`` that names them. An option that only shapes another mode (``top_p`` under greedy decoding,
``length_penalty`` without beams) is warned about and ignored, as Hugging Face's ``generate`` does
(``ignored_options``).

``GenerationConfig``: the options in one object, with Hugging Face's names and HF's precedence::

    model.generation_config                  # the model's defaults: its bos/eos/pad tokens (ModelConfig)
    generate(model, ids, generation_config=g, max_new_tokens=8)

What runs is, as in HF's ``generate``: the keyword arguments (even None: ``eos_token_id=None`` is "no eos"), over
the options the given ``generation_config`` sets (not None), over the model's ``generation_config`` (``resolve``).
``generation_config`` may be ours or a ``transformers`` ``GenerationConfig`` (read through ``to_dict()``); an
option of HF's that ours does not implement (``typical_p``, ``num_beam_groups``...) is refused by name when it is
set to a value that would change the result, never ignored.
"""

from __future__ import annotations

import copy
import warnings
from typing import TYPE_CHECKING, Any


def _positive_int(name: str, value: Any) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")


def new_token_budget(max_new_tokens: Any, max_length: Any, prompt_len: int) -> int:
    """``max_new_tokens``, or HF's ``max_length`` (which counts the prompt); neither: 20 new tokens with HF's
    warning (transformers 5 generates 20 new tokens when neither is given, whatever the prompt's length)."""
    if max_new_tokens is not None and max_length is not None:
        raise ValueError("give max_new_tokens or max_length, not both (max_length counts the prompt too)")
    if max_length is not None:
        if not isinstance(max_length, int) or isinstance(max_length, bool) or max_length < prompt_len:
            raise ValueError(f"max_length must be an integer >= the prompt length {prompt_len}, got {max_length!r}")
        return max_length - prompt_len
    if max_new_tokens is None:
        warnings.warn(
            "generate: neither max_new_tokens nor max_length given: 20 new tokens, Hugging Face's default; "
            "set max_new_tokens to control the length",
            UserWarning,
            stacklevel=3,
        )
    n = 20 if max_new_tokens is None else max_new_tokens
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise ValueError(f"max_new_tokens must be a non-negative integer, got {max_new_tokens!r}")
    return n


def ignored_options(options: dict[str, Any], said: set[str] | None = None) -> dict[str, Any]:
    """``options`` less the ones that only shape another mode, each named in one ``UserWarning`` (HF warns "The
    following generation flags are not valid and may be ignored" and runs without them). ``said``: the options the
    caller set (arguments, a ``generation_config=``); as in HF, only those are warned about, not the model's own
    defaults (a ``generation_config.json`` temperature under ``do_sample=False``)."""
    out = dict(options)
    ignored = []

    def warned(name: str) -> bool:
        return said is None or name in said

    if options.get("do_sample") is False:
        for name in ("temperature", "top_k", "top_p", "min_p"):
            value = options.get(name)
            if (
                value is not None
                and warned(name)
                and not (name == "temperature" and value == 1.0)
                and not (name == "top_p" and value == 1.0)
                and not (name == "top_k" and value == 50)
            ):
                ignored.append(f"{name}={value!r}")
            out[name] = None
    if options.get("num_beams") == 1:
        for name in ("length_penalty", "early_stopping"):
            if options.get(name) is not None and warned(name):
                ignored.append(f"{name}={options.get(name)!r}")
            out[name] = None
    if ignored:
        way = (
            f"beam search (num_beams={options.get('num_beams')})"
            if (options.get("num_beams") or 1) > 1
            else "greedy decoding"
            if options.get("do_sample") is False
            else "sampling"
        )
        warnings.warn(
            f"generate ignores {', '.join(ignored)}: they do not shape {way} (Hugging Face ignores them too)",
            UserWarning,
            stacklevel=3,
        )
    return out


def check_options(
    *,
    do_sample: bool,
    temperature: Any,
    top_k: Any,
    top_p: Any,
    min_p: Any,
    repetition_penalty: Any,
    num_beams: int,
    length_penalty: Any,
    early_stopping: Any,
    num_return_sequences: int,
    streamer: Any,
) -> None:
    if not isinstance(do_sample, bool):
        raise ValueError(f"do_sample must be True or False, got {do_sample!r}")
    _positive_int("num_beams", num_beams)
    _positive_int("num_return_sequences", num_return_sequences)
    if temperature is not None and not temperature > 0:
        raise ValueError(f"temperature must be > 0 (use do_sample=False for greedy), got {temperature}")
    if top_k is not None:
        _positive_int("top_k", top_k)
    if top_p is not None and not 0.0 < top_p <= 1.0:
        raise ValueError(f"top_p must be in (0, 1], got {top_p}")
    if min_p is not None and not 0.0 <= min_p <= 1.0:
        raise ValueError(f"min_p must be in [0, 1], got {min_p}")
    if repetition_penalty is not None and not (isinstance(repetition_penalty, (int, float)) and repetition_penalty > 0):
        raise ValueError(f"repetition_penalty must be a number > 0 (1.0 = none), got {repetition_penalty!r}")
    if num_beams == 1:
        if num_return_sequences > 1 and not do_sample:
            raise ValueError(
                f"num_return_sequences={num_return_sequences} with greedy decoding would repeat one "
                "sequence: pass do_sample=True or num_beams >= num_return_sequences"
            )
    else:
        if do_sample:
            raise ValueError(
                f"do_sample=True with num_beams={num_beams}: beam sampling is not implemented; "
                "use sampling (num_beams=1) or beam search (do_sample=False)"
            )
        if num_return_sequences > num_beams:
            raise ValueError(
                f"num_return_sequences={num_return_sequences} must be <= num_beams={num_beams}: "
                "beam search returns its best beams"
            )
        if early_stopping not in (None, True, False, "never"):
            raise ValueError(f"early_stopping must be True, False or 'never', got {early_stopping!r}")
        if length_penalty is not None and not isinstance(length_penalty, (int, float)):
            raise ValueError(f"length_penalty must be a number, got {length_penalty!r}")
        if streamer is not None:
            raise ValueError(
                f"streamer with num_beams={num_beams}: beams are reordered as they go, so no text is "
                "final before the end; stream with num_beams=1"
            )


# generate's options (HF's names), with the value that means "not set"
OPTIONS: dict[str, Any] = {
    "max_new_tokens": None,
    "max_length": None,
    "min_new_tokens": None,
    "min_length": None,
    "do_sample": None,
    "num_beams": None,
    "temperature": None,
    "top_k": None,
    "top_p": None,
    "min_p": None,
    "repetition_penalty": None,
    "length_penalty": None,
    "early_stopping": None,
    "num_return_sequences": None,
    "no_repeat_ngram_size": None,
    "bad_words_ids": None,
    "suppress_tokens": None,
    "stop_strings": None,
    "bos_token_id": None,
    "eos_token_id": None,
    "pad_token_id": None,
    "decoder_start_token_id": None,
    "return_dict_in_generate": None,
    "output_scores": None,
    "output_logits": None,
    "use_cache": None,
}
# what "not set" means once everything is merged (HF's global defaults where ours has none of its own)
# (top_k 50 is HF's: sampling keeps the 50 likeliest tokens unless top_k is given; a greedy call never warns of it)
DEFAULTS: dict[str, Any] = {
    "do_sample": False,
    "num_beams": 1,
    "num_return_sequences": 1,
    "use_cache": True,
    "top_k": 50,
    "return_dict_in_generate": False,
    "output_scores": False,
    "output_logits": False,
}
# HF GenerationConfig fields that change nothing here at these values (their defaults, or bookkeeping)
_HARMLESS: dict[str, tuple[Any, ...]] = {
    "output_attentions": (False, None),
    "output_hidden_states": (False, None),
    "transformers_version": (),
    "_from_model_config": (),
    "cache_implementation": (None,),
    "cache_config": (None,),
    "use_mtp": (None, False),
    "typical_p": (None, 1.0),
    "epsilon_cutoff": (None, 0.0),
    "eta_cutoff": (None, 0.0),
    "encoder_repetition_penalty": (None, 1.0),
    "encoder_no_repeat_ngram_size": (None, 0),
    "num_beam_groups": (None, 1),
    "diversity_penalty": (None, 0.0),
    "renormalize_logits": (None, False),
    "remove_invalid_values": (None, False),
    "guidance_scale": (None, 1.0),
    "max_time": (None,),
}


class GenerationConfig:
    """HF-named generation options; an unset option is None. ``GenerationConfig(max_new_tokens=8, do_sample=True)``,
    ``update(**kw)``, ``to_dict()``, ``to_diff_dict()`` (only the set options) and attribute access, as HF's."""

    if TYPE_CHECKING:  # every name of OPTIONS is an attribute (set in __init__)

        def __getattr__(self, name: str) -> Any: ...

    def __init__(self, **options: Any) -> None:
        for name, value in OPTIONS.items():
            setattr(self, name, value)
        # HF options a generation_config.json set that ours does not implement: kept so that generate refuses them
        # by name (read_options); update(name=None) clears one
        self.unsupported: dict[str, Any] = {}
        self.update(**options)

    def update(self, **options: Any) -> None:
        unknown = sorted(set(options) - set(OPTIONS) - set(self.unsupported))
        if unknown:
            raise ValueError(f"unknown generation option(s) {', '.join(unknown)}; known: {', '.join(OPTIONS)}")
        for name, value in options.items():
            if name in self.unsupported:
                if value is None:
                    del self.unsupported[name]
                else:
                    self.unsupported[name] = value
            else:
                setattr(self, name, value)

    def to_dict(self) -> dict[str, Any]:
        return {**{name: copy.deepcopy(getattr(self, name)) for name in OPTIONS}, **self.unsupported}

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
        out = cls(
            bos_token_id=getattr(config, "bos_token_id", None),
            eos_token_id=list(eos) if isinstance(eos, tuple) else eos,
            pad_token_id=getattr(config, "pad_token_id", None),
        )
        if getattr(config, "architecture", None) == "seq2seq":
            out.update(decoder_start_token_id=config.pad_token_id)
        return out


TOKEN_OPTIONS = ("bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id")
# read past in a generation_config.json and never written: the tokens live in ModelConfig; the cache is always used
_NOT_DEFAULTS = (*TOKEN_OPTIONS, "use_cache")


def from_hf_generation(values: dict[str, Any] | None, model_config: Any) -> GenerationConfig:
    """A model's generation defaults as HF's ``from_pretrained`` makes them: the special tokens of its
    ``ModelConfig`` (read from config.json and generation_config.json already), and every other option the
    ``generation_config.json`` dict ``values`` sets (``do_sample``, ``temperature``, ``top_k``, ``top_p``,
    ``max_new_tokens``...). An HF option ours does not implement, set to a value that matters, is kept in
    ``unsupported`` so that ``generate`` refuses it by name; HF's bookkeeping fields are read past."""
    out = GenerationConfig.from_model_config(model_config)
    for name, value in (values or {}).items():
        if name in _NOT_DEFAULTS or value is None:
            continue
        if name in OPTIONS:
            setattr(out, name, copy.deepcopy(value))
        elif name in _HARMLESS:
            if _HARMLESS[name] and value not in _HARMLESS[name]:
                out.unsupported[name] = value
        elif value not in (False, 0, [], {}):
            out.unsupported[name] = value
    return out


def generation_options(config: Any) -> dict[str, Any]:
    """The options a generation config sets besides the special tokens (what generation_config.json keeps for the
    model beside its tokens), HF's unsupported ones included; empty for a config that sets none."""
    if config is None or not callable(getattr(config, "to_dict", None)):
        return {}
    values = config.to_dict() if isinstance(config, GenerationConfig) else config.to_diff_dict()
    return {k: v for k, v in values.items() if v is not None and k not in _NOT_DEFAULTS and k in OPTIONS} | dict(
        getattr(config, "unsupported", {})
    )


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
        raise ValueError(
            f"{where} must be a GenerationConfig (ours or transformers') or a dict, got "
            f"{type(generation_config).__name__}"
        )
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
        raise ValueError(
            f"{where} sets option(s) anatomy's generate does not implement: {', '.join(refused)}; "
            f"it implements: {', '.join(OPTIONS)}"
        )
    return out


def resolve(model_config: Any, generation_config: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
    """Every option's value, HF's precedence: ``kwargs`` (even None) over ``generation_config``'s set options over
    the model's defaults, then ``DEFAULTS``."""
    unknown = sorted(set(kwargs) - set(OPTIONS))
    if unknown:
        raise TypeError(
            f"generate got an unexpected keyword argument {', '.join(map(repr, unknown))}; the HF "
            f"options it takes: {', '.join(OPTIONS)}"
        )
    merged = dict(OPTIONS)
    layers = [
        ("model.generation_config", read_options(model_config, where="model.generation_config")),
        ("generation_config", read_options(generation_config)),
        ("the arguments", dict(kwargs)),
    ]
    for i, (where, layer) in enumerate(layers):
        _length_precedence(where, layer, layers[:i])
    for _, layer in layers:
        merged.update(layer)
    for name, value in DEFAULTS.items():
        if merged[name] is None:
            merged[name] = value
    if merged["top_k"] == 0 and not isinstance(merged["top_k"], bool):
        merged["top_k"] = None  # HF's way to sample without a top-k cut (None means its default of 50)
    return merged


def _length_precedence(where: str, layer: dict[str, Any], below: list[tuple[str, dict[str, Any]]]) -> None:
    """HF's rule for the two lengths across layers: a ``max_new_tokens`` set anywhere wins over any ``max_length``
    (HF sets ``max_length`` from it). So a layer that sets ``max_new_tokens`` clears the ``max_length`` below it,
    and a ``max_length`` over a ``max_new_tokens`` from below, which HF would silently overrule, is refused."""
    if layer.get("max_new_tokens") is not None:
        for _, lower in below:
            lower.pop("max_length", None)
            lower.pop("max_new_tokens", None)
    elif layer.get("max_length") is not None:
        for lower_where, lower in below:
            if lower.get("max_new_tokens") is not None:
                raise ValueError(
                    f"max_length={layer['max_length']} ({where}) under {lower_where}'s "
                    f"max_new_tokens={lower['max_new_tokens']}: Hugging Face's generate would use max_new_tokens; "
                    "pass max_new_tokens instead"
                )
            lower.pop("max_length", None)
