"""``generate``'s options checked together: a bad value, or two options that cannot run together, is one
``ValueError`` that names them. An option that only shapes another mode (``top_p`` under greedy decoding,
``length_penalty`` without beams) is warned about and ignored, as Hugging Face's ``generate`` does
(``ignored_options``)."""

from __future__ import annotations

import warnings
from typing import Any


def _positive_int(name: str, value) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")


def new_token_budget(max_new_tokens, max_length, prompt_len: int) -> int:
    """``max_new_tokens``, or HF's ``max_length`` (which counts the prompt); default 32."""
    if max_new_tokens is not None and max_length is not None:
        raise ValueError("give max_new_tokens or max_length, not both (max_length counts the prompt too)")
    if max_length is not None:
        if not isinstance(max_length, int) or isinstance(max_length, bool) or max_length < prompt_len:
            raise ValueError(f"max_length must be an integer >= the prompt length {prompt_len}, got {max_length!r}")
        return max_length - prompt_len
    n = 32 if max_new_tokens is None else max_new_tokens
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise ValueError(f"max_new_tokens must be a non-negative integer, got {max_new_tokens!r}")
    return n


def ignored_options(options: dict[str, Any]) -> dict[str, Any]:
    """``options`` less the ones that only shape another mode, each named in one ``UserWarning`` (HF warns "The
    following generation flags are not valid and may be ignored" and runs without them)."""
    out = dict(options)
    ignored = []
    if options.get("do_sample") is False:
        for name in ("temperature", "top_k", "top_p", "min_p"):
            value = options.get(name)
            if value is not None and not (name == "temperature" and value == 1.0) \
                    and not (name == "top_p" and value == 1.0):
                ignored.append(f"{name}={value!r}")
            out[name] = None
    if options.get("num_beams") == 1:
        for name in ("length_penalty", "early_stopping"):
            if options.get(name) is not None:
                ignored.append(f"{name}={options.get(name)!r}")
            out[name] = None
    if ignored:
        way = f"beam search (num_beams={options.get('num_beams')})" if (options.get("num_beams") or 1) > 1 \
            else "greedy decoding" if options.get("do_sample") is False else "sampling"
        warnings.warn(f"generate ignores {', '.join(ignored)}: they do not shape {way} (Hugging Face ignores them "
                      "too)", UserWarning, stacklevel=3)
    return out


def check_options(*, do_sample: bool, temperature, top_k, top_p, min_p, repetition_penalty, num_beams: int,
                  length_penalty, early_stopping, num_return_sequences: int, streamer) -> None:
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
    if repetition_penalty is not None and not (isinstance(repetition_penalty, (int, float))
                                               and repetition_penalty > 0):
        raise ValueError(f"repetition_penalty must be a number > 0 (1.0 = none), got {repetition_penalty!r}")
    if num_beams == 1:
        if num_return_sequences > 1 and not do_sample:
            raise ValueError(f"num_return_sequences={num_return_sequences} with greedy decoding would repeat one "
                             "sequence: pass do_sample=True or num_beams >= num_return_sequences")
    else:
        if do_sample:
            raise ValueError(f"do_sample=True with num_beams={num_beams}: beam sampling is not implemented; "
                             "use sampling (num_beams=1) or beam search (do_sample=False)")
        if num_return_sequences > num_beams:
            raise ValueError(f"num_return_sequences={num_return_sequences} must be <= num_beams={num_beams}: "
                             "beam search returns its best beams")
        if early_stopping not in (None, True, False, "never"):
            raise ValueError(f"early_stopping must be True, False or 'never', got {early_stopping!r}")
        if length_penalty is not None and not isinstance(length_penalty, (int, float)):
            raise ValueError(f"length_penalty must be a number, got {length_penalty!r}")
        if streamer is not None:
            raise ValueError(f"streamer with num_beams={num_beams}: beams are reordered as they go, so no text is "
                             "final before the end; stream with num_beams=1")
