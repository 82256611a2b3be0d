"""What every Hugging Face family module shares: the key-table rows (``Entry``), config reading helpers, the
operations that turn one HF tensor into several of ours (``SPLITS``), and RoPE parameters in both spellings.

``rope_parameters`` (transformers 5) and ``rope_scaling`` (config.json files written by transformers 4) hold the same
dict: ``rope_type`` (or ``type``), ``factor``, ``original_max_position_embeddings``, ``low_freq_factor``/
``high_freq_factor`` (llama3), ``beta_fast``/``beta_slow``/``attention_factor``/``mscale``/``mscale_all_dim``/
``truncate`` (yarn), and in transformers 5 also ``rope_theta`` and ``partial_rotary_factor`` (older files keep
those at the top level, GPT-NeoX as ``rotary_emb_base`` and ``rotary_pct``). Both are read; the first non-empty wins.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from anatomy.components.ffn import default_d_ff
from anatomy.config import ModelConfig
from anatomy.errors import CheckpointError

_REQUIRED = object()


@dataclass(frozen=True)
class Entry:
    hf: tuple[str, ...]  # checkpoint key, then tied aliases
    ours: tuple[str, ...]  # our state-dict key, then tied aliases (a split op: the parts, in order)
    op: str = "copy"  # "copy" | "conv1d" (transpose the weight) | "drop" (read past on purpose) | a key of SPLITS


def _e(hf: str | tuple[str, ...], ours: str | tuple[str, ...], op: str = "copy") -> Entry:
    return Entry((hf,) if isinstance(hf, str) else tuple(hf), (ours,) if isinstance(ours, str) else tuple(ours), op)


def _linear(hf: str, ours: str, bias: bool, op: str = "copy") -> list[Entry]:
    rows = [_e(f"{hf}.weight", f"{ours}.weight", op)]
    return rows + ([_e(f"{hf}.bias", f"{ours}.bias", "drop" if op == "drop" else "copy")] if bias else [])


def _norm(hf: str, ours: str, bias: bool) -> list[Entry]:
    return _linear(hf, ours, bias)


def _lm_head(tied: tuple[str, ...]) -> list[Entry]:
    """The output head's row, under the same key on both sides; none when it is tied to the embedding (``tied``: the
    embedding's aliases)."""
    return [] if tied else [_e("lm_head.weight", "lm_head.weight")]


def tied_head(cfg: ModelConfig) -> tuple[str, ...]:
    """The token embedding's aliases: the output head's key (the same on both sides) when the two are tied."""
    return ("lm_head.weight",) if cfg.tie_embeddings else ()


def decoder_table(
    cfg: ModelConfig,
    embed: str,
    layers: str,
    final_norm: str,
    norm_bias: bool,
    layer: Callable[[str, str], list[Entry]],
    extra: tuple[Entry, ...] = (),
) -> list[Entry]:
    """The key table of a decoder-only LM: the token embedding ``embed`` (with the head when tied), the ``extra``
    rows (GPT-2's learned positions), each layer's rows from ``layer(HF prefix, our prefix)`` (``layers.{i}`` ->
    ``stack.blocks.{i}``), the final norm and the untied head."""
    tied = tied_head(cfg)
    rows = [_e((embed, *tied), ("embeddings.embed_tokens.weight", *tied)), *extra]
    for i in range(cfg.n_layers):
        rows += layer(f"{layers}.{i}", f"stack.blocks.{i}")
    rows += _norm(final_norm, "stack.final_norm", norm_bias)
    return rows + _lm_head(tied)


def ffn_width(cfg: ModelConfig) -> int:
    """The FFN's hidden width as HF writes it: ours, or its default when the config leaves it to the activation."""
    return cfg.d_ff or default_d_ff(cfg.d_model, cfg.activation)


def read_sizes(c: dict[str, Any], max_len: int) -> dict[str, Any]:
    """The ``ModelConfig`` sizes from the names most families' ``config.json`` share (:func:`hf_sizes` read back);
    ``max_len``: the family's default ``max_position_embeddings``."""
    return dict(
        d_model=_get(c, "hidden_size"),
        n_heads=_get(c, "num_attention_heads"),
        n_layers=_get(c, "num_hidden_layers"),
        d_ff=_get(c, "intermediate_size"),
        max_seq_len=c.get("max_position_embeddings", max_len),
    )


def hf_sizes(cfg: ModelConfig) -> dict[str, int]:
    """The sizes under the names most families' ``config.json`` share (BERT, GPT-NeoX, Llama, Gemma...)."""
    return dict(
        hidden_size=cfg.d_model,
        num_attention_heads=cfg.n_heads,
        num_hidden_layers=cfg.n_layers,
        intermediate_size=ffn_width(cfg),
        max_position_embeddings=cfg.max_seq_len,
    )


def _get(c: dict[str, Any], key: str, default: Any = _REQUIRED) -> Any:
    value = c.get(key, default)
    if value is _REQUIRED:
        raise CheckpointError(f"Hugging Face config lacks the required field {key!r}")
    return value


def _pad(c: dict[str, Any], vocab: int) -> int | None:
    """HF's ``pad_token_id``; None when it names none (or one outside the vocabulary, which no row could hold)."""
    pad = c.get("pad_token_id")
    return pad if isinstance(pad, int) and not isinstance(pad, bool) and 0 <= pad < vocab else None


def _token_id(value: Any, key: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise CheckpointError(
            f"Hugging Face config field {key!r} must be a non-negative integer or null, got {value!r}"
        )
    return value


def special_tokens(c: dict[str, Any], generation: dict[str, Any] | None, vocab: int) -> dict[str, Any]:
    """``bos_token_id``, ``eos_token_id`` (an int or a tuple) and ``pad_token_id`` as HF's ``generate`` sees them:
    ``generation_config.json`` (``generation``) where it names a token, else ``config.json`` (``c``)."""

    def pick(key: str) -> Any:
        if generation is not None and generation.get(key) is not None:
            return generation[key]
        return c.get(key)

    eos = pick("eos_token_id")
    eos_value: int | tuple[int, ...] | None
    if isinstance(eos, (list, tuple)):
        ids = tuple(i for i in (_token_id(e, "eos_token_id") for e in eos) if i is not None)
        eos_value = None if not ids else ids[0] if len(ids) == 1 else ids
    else:
        eos_value = _token_id(eos, "eos_token_id")
    return dict(
        bos_token_id=_token_id(pick("bos_token_id"), "bos_token_id"),
        eos_token_id=eos_value,
        pad_token_id=_pad({"pad_token_id": pick("pad_token_id")}, vocab),
    )


def label_names(c: dict[str, Any], num_labels: int) -> tuple[str, ...] | None:
    """A classifier's class names from HF's ``id2label`` (keys "0", "1"... in config.json); None when absent or
    HF's own placeholders ``LABEL_0``..."""
    raw = c.get("id2label") or {}
    try:
        names = {int(k): str(v) for k, v in raw.items()}
    except (TypeError, ValueError, AttributeError):
        raise CheckpointError(
            f"Hugging Face config field 'id2label' must map class ids to names, got {raw!r}"
        ) from None
    if sorted(names) != list(range(num_labels)):
        return None
    out = tuple(names[i] for i in range(num_labels))
    return None if out == tuple(f"LABEL_{i}" for i in range(num_labels)) else out


def _refuse(arch: str, what: str) -> CheckpointError:
    return CheckpointError(f"{arch}: {what} is not supported by anatomy's converter")


_ACT_FROM_HF = {
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "gelu": "gelu",
    "relu": "relu",
    "silu": "silu",
    "swish": "silu",
}
_ACT_TO_HF = {"gelu_tanh": "gelu_new", "gelu": "gelu", "relu": "relu", "silu": "silu"}


def _activation(arch: str, name: str) -> str:
    if name not in _ACT_FROM_HF:
        raise _refuse(arch, f"activation {name!r} (supported: {', '.join(sorted(_ACT_FROM_HF))})")
    return _ACT_FROM_HF[name]


# ------------------------------------------------------------------------------------------ one tensor ↔ several


@dataclass(frozen=True)
class Split:
    """``to_ours(hf_value, cfg, n_parts) -> parts`` and ``to_hf(parts, cfg) -> hf_value``; HF's tensor has the
    parts' rows stacked (its shape is checked as their rows summed)."""

    to_ours: Callable[[torch.Tensor, ModelConfig, int], tuple[torch.Tensor, ...]]
    to_hf: Callable[[tuple[torch.Tensor, ...], ModelConfig], torch.Tensor]


def _neox_to_ours(value: torch.Tensor, cfg: ModelConfig, n: int) -> tuple[torch.Tensor, ...]:
    """GPT-NeoX's ``query_key_value`` rows are per head ``[q_h | k_h | v_h]``; our ``qkv_proj`` is ``[q | k | v]``."""
    rest = value.shape[1:]
    per_head = value.reshape(cfg.n_heads, 3, cfg.dh, *rest)  # (H, 3, Dh, D) or (H, 3, Dh)
    return (per_head.transpose(0, 1).reshape(value.shape),)  # (3 * H * Dh, D) or (3 * H * Dh,): [q | k | v]


def _neox_to_hf(parts: tuple[torch.Tensor, ...], cfg: ModelConfig) -> torch.Tensor:
    (value,) = parts
    rest = value.shape[1:]
    grouped = value.reshape(3, cfg.n_heads, cfg.dh, *rest)  # (3, H, Dh, D) or (3, H, Dh)
    return grouped.transpose(0, 1).reshape(value.shape)  # (H * 3 * Dh, D) or (H * 3 * Dh,): per head [q | k | v]


SPLITS: dict[str, Split] = {
    # Phi-3's gate_up_proj: rows [gate (F) | up (F)] → our ffn.gate_proj, ffn.up_proj (any stacked rows, in order)
    "cat": Split(lambda value, cfg, n: tuple(value.chunk(n, dim=0)), lambda parts, cfg: torch.cat(parts, dim=0)),
    "neox_qkv": Split(_neox_to_ours, _neox_to_hf),
}


# ------------------------------------------------------------------------------------------ RoPE parameters

ROPE_KINDS = ("linear", "dynamic", "llama3", "yarn")
_ROPE_KEYS = {
    "rope_type",
    "type",
    "rope_theta",
    "partial_rotary_factor",
    "factor",
    "original_max_position_embeddings",
    "low_freq_factor",
    "high_freq_factor",
    "beta_fast",
    "beta_slow",
    "attention_factor",
    "mscale",
    "mscale_all_dim",
    "truncate",
}


def read_rope(c: dict[str, Any], arch: str, *, fraction: float = 1.0, partial: bool = False) -> dict[str, Any]:
    """``ModelConfig`` RoPE fields from an HF config. ``fraction``: the family's default partial rotary factor;
    ``partial``: whether the family rotates part of a head at all (Llama, Qwen, Gemma rotate all of it)."""
    rope = c.get("rope_parameters") or c.get("rope_scaling") or {}
    if any(isinstance(v, dict) for v in rope.values()):
        nested = ", ".join(k for k, v in rope.items() if isinstance(v, dict))
        raise _refuse(arch, f"rope_parameters per layer type ({nested})")
    unknown = sorted(set(rope) - _ROPE_KEYS)
    if unknown:
        raise _refuse(arch, f"rope_parameters key(s) {', '.join(unknown)}")
    kind = rope.get("rope_type", rope.get("type", "default"))
    theta = rope.get("rope_theta", c.get("rope_theta", c.get("rotary_emb_base", 10000.0)))
    frac = float(rope.get("partial_rotary_factor", c.get("partial_rotary_factor", c.get("rotary_pct", fraction))))
    if frac != 1.0 and not partial:
        raise _refuse(arch, f"partial_rotary_factor={frac} (this family rotates the whole head)")
    out: dict[str, Any] = dict(rope_base=float(theta), rope_fraction=frac)
    if kind == "default":
        return out
    if kind not in ROPE_KINDS:
        raise _refuse(arch, f"rope_parameters.rope_type={kind!r} (supported: default, {', '.join(ROPE_KINDS)})")
    max_len = c.get("max_position_embeddings", 2048)
    original = rope.get("original_max_position_embeddings") or c.get("original_max_position_embeddings")
    factor = rope.get("factor")
    if factor is None and kind == "yarn" and original:
        factor = max_len / original
    if factor is None:
        raise _refuse(arch, f"rope_parameters.rope_type={kind!r} without a factor")
    out.update(rope_scaling=kind, rope_factor=float(factor))
    if kind in ("llama3", "yarn"):
        out["rope_original_max_len"] = int(original) if original else None
    if kind == "llama3":
        out.update(
            rope_low_freq_factor=float(_get(rope, "low_freq_factor")),
            rope_high_freq_factor=float(_get(rope, "high_freq_factor")),
        )
    if kind == "yarn":
        attention = rope.get("attention_factor")
        mscale, mscale_all = rope.get("mscale"), rope.get("mscale_all_dim")
        if attention is None and mscale and mscale_all:  # DeepSeek's ratio of two YaRN mscales

            def get_mscale(scale: float, m: float) -> float:
                return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

            attention = get_mscale(factor, mscale) / get_mscale(factor, mscale_all)
        out.update(
            rope_beta_fast=float(rope.get("beta_fast") or 32.0),
            rope_beta_slow=float(rope.get("beta_slow") or 1.0),
            rope_attention_factor=None if attention is None else float(attention),
            rope_truncate=bool(rope.get("truncate", True)),
        )
    return out


def write_rope(cfg: ModelConfig) -> dict[str, Any]:
    """``rope_parameters`` for transformers 5 (it reads ``rope_theta`` and ``partial_rotary_factor`` there too)."""
    out: dict[str, Any] = {"rope_type": cfg.rope_scaling or "default", "rope_theta": cfg.rope_base}
    if cfg.rope_fraction != 1.0:
        out["partial_rotary_factor"] = cfg.rope_fraction
    if cfg.rope_scaling is not None:
        out["factor"] = cfg.rope_factor
    if cfg.rope_scaling in ("llama3", "yarn"):
        out["original_max_position_embeddings"] = cfg.rope_original_max_len or cfg.max_seq_len
    if cfg.rope_scaling == "llama3":
        out.update(low_freq_factor=cfg.rope_low_freq_factor, high_freq_factor=cfg.rope_high_freq_factor)
    if cfg.rope_scaling == "yarn":
        out.update(beta_fast=cfg.rope_beta_fast, beta_slow=cfg.rope_beta_slow, truncate=cfg.rope_truncate)
        if cfg.rope_attention_factor is not None:
            out["attention_factor"] = cfg.rope_attention_factor
    return out
