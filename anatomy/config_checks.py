"""The checks of ``ModelConfig``'s token and label fields and of the options of the Hugging Face families beyond
Llama (RoPE scaling, partial rotary, parallel residual, Gemma's norms and soft-capping): called by
``ModelConfig.__post_init__``, each error names the field, its value and what it needs."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from anatomy.components.positional import ROPE_SCALINGS
from anatomy.shapes import check_choice

if TYPE_CHECKING:
    from anatomy.config import ModelConfig

PROBLEM_TYPES = ("regression", "single_label_classification", "multi_label_classification")  # HF's problem_type


def is_type(value: Any, want: type) -> bool:
    if want is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if want is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, want)


def check_tokens(config: ModelConfig) -> None:
    """bos/eos: non-negative ids (eos: one or a non-empty tuple, a JSON list read back as a tuple); the label
    names: one string per class."""
    if config.bos_token_id is not None and not (is_type(config.bos_token_id, int) and config.bos_token_id >= 0):
        raise ValueError(f"bos_token_id must be a non-negative integer or None, got {config.bos_token_id!r}")
    eos = config.eos_token_id
    if isinstance(eos, list):
        eos = tuple(eos)
        object.__setattr__(config, "eos_token_id", eos)
    ids: tuple[object, ...] = () if eos is None else eos if isinstance(eos, tuple) else (eos,)
    if eos is not None and (not ids or not all(isinstance(i, int) and is_type(i, int) and i >= 0 for i in ids)):
        raise ValueError(
            f"eos_token_id must be a non-negative integer, a non-empty list of them or None, got "
            f"{config.eos_token_id!r}"
        )
    if config.problem_type is not None:
        check_choice("problem_type", config.problem_type, PROBLEM_TYPES)
    names = config.label_names
    if isinstance(names, list):
        names = tuple(names)
        object.__setattr__(config, "label_names", names)
    if names is not None:
        if not isinstance(names, tuple) or not all(isinstance(n, str) for n in names):
            raise ValueError(f"label_names must be a list of strings or None, got {names!r}")
        if len(names) != config.num_labels or len(set(names)) != len(names):
            raise ValueError(
                f"label_names must name each of the num_labels={config.num_labels} classes once, got {list(names)}"
            )


def check_family_options(config: ModelConfig) -> None:
    """The fields of the families beyond Llama: each error names the field, its value and what it needs."""
    rope = config.positional == "rope"
    if config.rope_scaling is not None:
        check_choice("rope_scaling", config.rope_scaling, tuple(ROPE_SCALINGS))
        if not rope:
            raise ValueError(
                f"rope_scaling={config.rope_scaling!r} needs positional='rope', got positional={config.positional!r}"
            )
    if not (math.isfinite(config.rope_factor) and config.rope_factor >= 1.0):
        raise ValueError(f"rope_factor must be a finite number >= 1 (the context stretch), got {config.rope_factor}")
    if config.rope_scaling is None and config.rope_factor != 1.0:
        raise ValueError(f"rope_factor={config.rope_factor} needs rope_scaling (linear, dynamic, llama3 or yarn)")
    if config.rope_original_max_len is not None and config.rope_original_max_len <= 0:
        raise ValueError(
            f"rope_original_max_len must be a positive integer or None, got {config.rope_original_max_len}"
        )
    if config.rope_scaling == "llama3" and not config.rope_high_freq_factor > config.rope_low_freq_factor > 0:
        raise ValueError(
            f"rope_scaling='llama3' needs rope_high_freq_factor > rope_low_freq_factor > 0, got "
            f"{config.rope_high_freq_factor} and {config.rope_low_freq_factor}"
        )
    if config.rope_scaling == "yarn" and not config.rope_beta_fast > config.rope_beta_slow > 0:
        raise ValueError(
            f"rope_scaling='yarn' needs rope_beta_fast > rope_beta_slow > 0, got "
            f"{config.rope_beta_fast} and {config.rope_beta_slow}"
        )
    if config.rope_attention_factor is not None and not config.rope_attention_factor > 0:
        raise ValueError(f"rope_attention_factor must be > 0 or None, got {config.rope_attention_factor}")
    if not 0.0 < config.rope_fraction <= 1.0:
        raise ValueError(
            f"rope_fraction must be in (0, 1] (the share of each head RoPE rotates), got {config.rope_fraction}"
        )
    if config.rope_fraction != 1.0:
        if not rope:
            raise ValueError(
                f"rope_fraction={config.rope_fraction} needs positional='rope', got positional={config.positional!r}"
            )
        if config.rotary_dim < 2 or config.rotary_dim % 2:
            raise ValueError(
                f"rope_fraction={config.rope_fraction} rotates int(Dh * rope_fraction) = "
                f"{config.rotary_dim} dims of Dh={config.dh}; that must be an even number >= 2"
            )
    if config.parallel_residual and (config.norm_position != "pre" or config.architecture == "seq2seq"):
        raise ValueError(
            f"parallel_residual=True needs norm_position='pre' and a stack of encoder-style blocks "
            f"(not seq2seq), got norm_position={config.norm_position!r}, "
            f"architecture={config.architecture!r}"
        )
    if not math.isfinite(config.norm_weight_offset):
        raise ValueError(f"norm_weight_offset must be a finite number, got {config.norm_weight_offset}")
    if config.norm_weight_offset and config.norm != "rmsnorm":
        raise ValueError(
            f"norm_weight_offset={config.norm_weight_offset} needs norm='rmsnorm' (Gemma's "
            f"(1 + weight) RMSNorm), got norm={config.norm!r}"
        )
    for name in ("attn_softcap", "final_logit_softcap"):
        value = getattr(config, name)
        if value is not None and not (math.isfinite(value) and value > 0):
            raise ValueError(f"{name} must be a positive number or None, got {value}")
    if config.attn_softcap is not None and config.kernel == "sdpa":
        raise ValueError(
            f"attn_softcap={config.attn_softcap} needs a kernel that materialises the scores: "
            "kernel='math', 'loop' or 'auto', not 'sdpa'"
        )
    if config.final_logit_softcap is not None and config.architecture != "decoder_lm":
        raise ValueError(f"final_logit_softcap needs architecture='decoder_lm', got {config.architecture!r}")
