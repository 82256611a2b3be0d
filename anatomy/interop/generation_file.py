"""A checkpoint's ``generation_config.json``, checked field by field when it is read (``load_pretrained``).

Hugging Face's ``from_pretrained`` reads this file into ``model.generation_config``, and ``generate`` takes its
values as defaults that the call's arguments override. HF (transformers 5.24) checks the values only when
``generate`` runs, and then not all of them: ``"do_sample": "yes"`` samples, ``"max_new_tokens": 7.5`` runs,
``"max_new_tokens": "7"`` ends in a ``TypeError`` deep in the loop, and a file that is not JSON at all is passed
over in silence for the tokens of ``config.json``. Here every option ``anatomy`` reads is checked when the file is
read, and a wrong one is refused in one line naming the file, the field and what was expected; a file that is not
JSON is refused the same way (``anatomy.files.read_json``). A field Hugging Face does not know (a typo, another
tool's note) is ignored as HF ignores it, with a warning naming it; an HF option ``anatomy`` does not implement
(``typical_p``...) is kept, and ``generate`` refuses it by name when its value would change the result.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from anatomy.errors import CheckpointError

# every field transformers 5.24's GenerationConfig reads (its __init__), beyond the ones checked below
HF_FIELDS = frozenset(
    {
        "_from_model_config",
        "assistant_confidence_threshold",
        "assistant_early_exit",
        "assistant_ensemble_weight",
        "assistant_lookbehind",
        "begin_suppress_tokens",
        "cache_config",
        "cache_implementation",
        "compile_config",
        "constraints",
        "continuous_batching_config",
        "disable_compile",
        "diversity_penalty",
        "dola_layers",
        "encoder_no_repeat_ngram_size",
        "encoder_repetition_penalty",
        "epsilon_cutoff",
        "eta_cutoff",
        "exponential_decay_length_penalty",
        "force_words_ids",
        "forced_bos_token_id",
        "forced_eos_token_id",
        "guidance_scale",
        "is_assistant",
        "low_memory",
        "max_cache_len",
        "max_matching_ngram_size",
        "max_time",
        "num_assistant_tokens",
        "num_assistant_tokens_schedule",
        "num_beam_groups",
        "output_attentions",
        "output_hidden_states",
        "penalty_alpha",
        "prefill_chunk_size",
        "prompt_lookup_num_tokens",
        "remove_invalid_values",
        "renormalize_logits",
        "sequence_bias",
        "speculation_type",
        "target_lookbehind",
        "token_healing",
        "top_h",
        "transformers_version",
        "typical_p",
        "use_mtp",
        "watermarking_config",
    }
)


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _ids(value: Any) -> bool:
    return isinstance(value, list) and all(_int(v) and v >= 0 for v in value)


# the options anatomy's generate reads: (is the value right, what was expected)
CHECKS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "max_new_tokens": (lambda v: _int(v) and v >= 1, "a positive integer"),
    "max_length": (lambda v: _int(v) and v >= 1, "a positive integer (it counts the prompt)"),
    "min_new_tokens": (lambda v: _int(v) and v >= 0, "a non-negative integer"),
    "min_length": (lambda v: _int(v) and v >= 0, "a non-negative integer"),
    "do_sample": (lambda v: isinstance(v, bool), "true or false"),
    "num_beams": (lambda v: _int(v) and v >= 1, "a positive integer"),
    "num_return_sequences": (lambda v: _int(v) and v >= 1, "a positive integer"),
    "temperature": (lambda v: _number(v) and v > 0, "a number > 0"),
    "top_k": (lambda v: _int(v) and v >= 0, "an integer >= 0 (0: no cut)"),
    "top_p": (lambda v: _number(v) and 0 < v <= 1, "a number in (0, 1]"),
    "min_p": (lambda v: _number(v) and 0 <= v <= 1, "a number in [0, 1]"),
    "repetition_penalty": (lambda v: _number(v) and v > 0, "a number > 0 (1.0: none)"),
    "length_penalty": (_number, "a number"),
    "early_stopping": (lambda v: isinstance(v, bool) or v == "never", 'true, false or "never"'),
    "no_repeat_ngram_size": (lambda v: _int(v) and v >= 0, "a non-negative integer"),
    "bad_words_ids": (lambda v: isinstance(v, list) and all(_ids(x) and x for x in v), "a list of token-id lists"),
    "suppress_tokens": (_ids, "a list of token ids"),
    "stop_strings": (
        lambda v: isinstance(v, str) or (isinstance(v, list) and all(isinstance(x, str) for x in v)),
        "a string or a list of strings",
    ),
    "bos_token_id": (lambda v: _int(v) and v >= 0, "a token id (an integer >= 0)"),
    "pad_token_id": (lambda v: _int(v) and v >= 0, "a token id (an integer >= 0)"),
    "decoder_start_token_id": (lambda v: _int(v) and v >= 0, "a token id (an integer >= 0)"),
    "eos_token_id": (lambda v: (_int(v) and v >= 0) or (_ids(v) and v), "a token id or a list of token ids"),
    "use_cache": (lambda v: isinstance(v, bool), "true or false"),
    "return_dict_in_generate": (lambda v: isinstance(v, bool), "true or false"),
    "output_scores": (lambda v: isinstance(v, bool), "true or false"),
    "output_logits": (lambda v: isinstance(v, bool), "true or false"),
}


def check_generation_file(data: dict[str, Any], path: Path | str) -> dict[str, Any]:
    """``data`` (the file's object) less the fields Hugging Face does not know, each warned about; a field
    ``anatomy`` reads with a wrong type or value is a ``CheckpointError`` naming ``path`` and the field."""
    out: dict[str, Any] = {}
    unknown = []
    for name, value in data.items():
        if name in CHECKS:
            ok, expected = CHECKS[name]
            if value is not None and not ok(value):
                raise CheckpointError(f"{path}: field {name!r} must be {expected}, got {value!r}")
        elif name not in HF_FIELDS:
            unknown.append(name)
            continue
        out[name] = value
    if unknown:
        warnings.warn(
            f"{path}: {', '.join(map(repr, unknown))} {'is no' if len(unknown) == 1 else 'are no'} Hugging Face "
            "generation option; ignored, as transformers ignores it",
            UserWarning,
            stacklevel=3,
        )
    return out
