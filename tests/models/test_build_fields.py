"""``ModelConfig``'s fields are grouped and each is documented where it is declared; moving the presets to
anatomy/presets.py kept every name, default and import path."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import anatomy.config as config_module
import anatomy.presets as presets_module
from anatomy.config import ModelConfig

SOURCE = Path(config_module.__file__).read_text(encoding="utf-8")
GROUPS = [
    "architecture & sizes",
    "attention",
    "positions",
    "norms & residual",
    "FFN",
    "embeddings & head",
    "initialisation",
    "regularisation",
    "options of more Hugging Face families",
    "tokens & labels",
]
FIELD = re.compile(r"^    (\w+): [^=]+ = .+$")
# Every field's name and default before the regrouping (c49bb6b): saved configs, JSON and key=value words rely
# on them; the field order may change.
DEFAULTS_AT_C49BB6B = {
    "activation": "gelu",
    "architecture": "decoder_lm",
    "attention_dropout": 0.0,
    "attn_scale": None,
    "attn_softcap": None,
    "bias": True,
    "d_ff": None,
    "d_model": 128,
    "dropout": 0.0,
    "embedding_norm": False,
    "final_logit_softcap": None,
    "final_norm": None,
    "fused_qkv": False,
    "head_dim": None,
    "init": "normal",
    "init_std": 0.02,
    "kernel": "auto",
    "max_relative_distance": 16,
    "max_seq_len": 512,
    "n_decoder_layers": None,
    "n_heads": 4,
    "n_kv_heads": None,
    "n_layers": 2,
    "norm": "layernorm",
    "norm_eps": 1e-05,
    "norm_position": "pre",
    "norm_weight_offset": 0.0,
    "num_labels": 2,
    "output_scale": 1.0,
    "pad_token_id": 0,
    "parallel_residual": False,
    "pooler": False,
    "pooling": "cls",
    "positional": "sinusoidal",
    "qk_norm": False,
    "qkv_bias": None,
    "rope_attention_factor": None,
    "rope_base": 10000.0,
    "rope_beta_fast": 32.0,
    "rope_beta_slow": 1.0,
    "rope_factor": 1.0,
    "rope_fraction": 1.0,
    "rope_high_freq_factor": 4.0,
    "rope_layout": "half",
    "rope_low_freq_factor": 1.0,
    "rope_original_max_len": None,
    "rope_scaling": None,
    "rope_truncate": True,
    "scale_embeddings": False,
    "sliding_window": None,
    "t5_max_distance": 128,
    "t5_num_buckets": 32,
    "tie_embeddings": True,
    "type_vocab_size": 0,
    "vocab_size": 256,
    "window_pattern": None,
}


def _declarations() -> list[tuple[str, str, str]]:
    """``(field, its group, its comment)`` in declaration order, from the class body's source."""
    body = SOURCE[SOURCE.index("class ModelConfig:") : SOURCE.index("    def __post_init__")].splitlines()
    out, group, pending = [], None, []
    for line in body:
        stripped = line.strip()
        if stripped.startswith("# ---"):
            group, pending = stripped.removeprefix("# ---").strip(" -"), []
        elif stripped.startswith("#"):
            pending.append(stripped.lstrip("# "))
        elif (m := FIELD.match(line)) is not None:
            trailing = line.split("  # ", 1)[1] if "  # " in line else ""
            out.append((m.group(1), group, trailing or " ".join(pending)))
            pending = []
    return out


def test_every_field_is_declared_in_a_group_with_its_own_comment():
    found = _declarations()
    assert [name for name, _, _ in found] == [f.name for f in dataclasses.fields(ModelConfig)]
    for name, group, comment in found:
        assert group is not None and any(group.startswith(g) for g in GROUPS), (name, group)
        assert len(comment) > 10, f"{name} has no comment where it is declared"
    assert [g for g in GROUPS if not any(grp.startswith(g) for _, grp, _ in found)] == []


def test_choice_fields_name_their_choices_in_the_comment():
    comments = {name: comment for name, _, comment in _declarations()}
    for name, choices in (
        ("architecture", config_module.ARCHITECTURES),
        ("init", config_module.INITS),
        ("pooling", config_module.POOLINGS),
        ("norm_position", ("post", "pre", "sandwich", "deepnorm")),
    ):
        assert all(f'"{c}"' in comments[name] for c in choices), name


def test_deepnorm_says_it_sets_the_init_where_it_is_declared():
    comment = dict((n, c) for n, _, c in _declarations())["norm_position"]
    assert "deepnorm" in comment and "beta" in comment and "whatever `init` says" in comment


def test_the_presets_moved_but_every_name_still_imports_from_config():
    for name in ("PRESETS", "PRESET_RULES", "LOOK_VOCAB", "large_vocab_presets", "preset_sizes"):
        assert getattr(config_module, name) is getattr(presets_module, name)
    assert ModelConfig.from_preset("gpt2", d_model=256).d_ff == 1024


# added since (issue 21): the special tokens, class names and BertModel's pooler (config_module.OPTIONAL_FIELDS)
ADDED_SINCE = {
    "bos_token_id": None,
    "eos_token_id": None,
    "label_names": None,
    "encoder_pooler": False,
    "problem_type": None,  # issue 30
}


def test_names_and_defaults_are_those_saved_configs_were_written_with():
    assert {f.name: f.default for f in dataclasses.fields(ModelConfig)} == {**DEFAULTS_AT_C49BB6B, **ADDED_SINCE}
    assert set(ADDED_SINCE) == set(config_module.OPTIONAL_FIELDS)
