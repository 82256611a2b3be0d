"""Preset sizes follow an overridden d_model (issue 14): d_ff, head counts, kv heads; given sizes win."""

from __future__ import annotations

import pytest

from anatomy import PRESETS, ModelConfig, build_model
from anatomy.components.ffn import default_d_ff
from anatomy.config import PRESET_RULES


def test_gpt2_at_d_model_256_has_a_4x_ffn_and_heads_of_64_like_hf():
    c = ModelConfig.from_preset("gpt2", d_model=256)
    assert c.d_ff == 1024 and c.n_heads == 4 and c.dh == 64
    ffn = build_model(c.replace(n_layers=1, vocab_size=50)).stack.blocks[0].ffn
    assert ffn.up_proj.weight.shape == (1024, 256)


def test_the_preset_keeps_its_rates_at_any_size():
    """Documented in from_preset: dropout and attention_dropout are not sizes, they do not follow d_model."""
    c = ModelConfig.from_preset("gpt2", d_model=256)
    assert c.dropout == 0.1 and c.attention_dropout == 0.1
    assert "attention_dropout" in ModelConfig.from_preset.__doc__
    assert ModelConfig.from_preset("gpt2", d_model=256, dropout=0.0, attention_dropout=0.0).attention_dropout == 0


def _ratio(name: str, d: int) -> int:
    rule = PRESET_RULES[name]["d_ff"]
    return default_d_ff(d, "swiglu") if rule == "gated" else rule * d


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_states_its_rule_and_the_rule_gives_its_published_sizes(name):
    preset = PRESETS[name]
    assert name in PRESET_RULES, "a new preset must say how its sizes follow d_model"
    assert _ratio(name, preset["d_model"]) == preset["d_ff"]
    width = PRESET_RULES[name].get("head_width")
    if width:
        assert preset["d_model"] // preset["n_heads"] == width


@pytest.mark.parametrize("name", sorted(PRESETS))
@pytest.mark.parametrize("d", [128, 192, 256, 512])
def test_every_preset_derived_sizes_follow_d_model(name, d):
    preset = PRESETS[name]
    c = ModelConfig.from_preset(name, d_model=d)
    assert c.d_model == d and c.d_ff == _ratio(name, d) != (preset["d_ff"] if d != preset["d_model"] else None)
    width = PRESET_RULES[name].get("head_width")
    if width:
        assert c.n_heads == d // width and c.dh == width
    else:  # heads not tied to d_model: qwen3's head_dim, the post's 4 heads of seed-block
        assert c.n_heads == preset["n_heads"] and c.head_dim == preset.get("head_dim")
    if preset.get("n_kv_heads"):
        assert c.n_heads % c.kv_heads == 0
        assert c.n_heads // c.kv_heads >= min(c.n_heads, preset["n_heads"] // preset["n_kv_heads"])


def test_given_sizes_win_over_the_rules():
    c = ModelConfig.from_preset("gpt2", d_model=256, d_ff=3072, n_heads=8)
    assert (c.d_ff, c.n_heads) == (3072, 8)
    assert ModelConfig.from_preset("gpt2", d_model=256, d_ff=None).d_ff is None  # None given: the FFN's default
    assert ModelConfig.from_preset("llama", d_model=256, n_kv_heads=4).kv_heads == 4
    assert ModelConfig.from_preset("llama", d_model=256, head_dim=32).n_heads == 9  # head_dim: heads stay


def test_without_a_d_model_override_the_published_sizes_stay():
    for name, preset in PRESETS.items():
        c = ModelConfig.from_preset(name, n_layers=1)
        assert (c.d_model, c.d_ff, c.n_heads, c.n_kv_heads) == (
            preset["d_model"],
            preset["d_ff"],
            preset["n_heads"],
            preset.get("n_kv_heads"),
        )


def test_heads_stay_when_d_model_is_not_a_multiple_of_the_head_width():
    c = ModelConfig.from_preset("gpt2", d_model=48)  # 12 heads of 4, as before the rules
    assert (c.n_heads, c.d_ff) == (12, 192)
    c = ModelConfig.from_preset("llama", d_model=72)
    assert (c.n_heads, c.n_kv_heads, c.d_ff) == (9, 3, 192)


def test_kv_heads_keep_the_group_size_when_the_head_count_changes():
    assert ModelConfig.from_preset("llama", d_model=384).n_kv_heads == 2  # 6 heads, groups of 3 like 9/3
    assert ModelConfig.from_preset("llama", d_model=128).n_kv_heads == 1  # 2 heads: one shared kv head
    assert ModelConfig.from_preset("llama", n_heads=12, head_dim=48).n_kv_heads == 4


def test_a_bad_override_is_still_named_by_validation():
    with pytest.raises(ValueError, match="d_model must be a positive integer"):
        ModelConfig.from_preset("gpt2", d_model=-8)
    with pytest.raises(ValueError, match="d_model=100 must be divisible by n_heads=12"):
        ModelConfig.from_preset("gpt2", d_model=100)
