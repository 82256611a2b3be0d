"""anatomy.inspection.tl_names: get_act_name follows TransformerLens's rules; the name table says what it refuses."""

from __future__ import annotations

import pytest

import anatomy
from anatomy.inspection import get_act_name
from anatomy.inspection.tl_names import tl_points

CASES = [
    ("pattern", 0, None),
    ("k", 6, "a"),
    ("pre", 2, None),
    ("embed", None, None),
    ("normalized", 27, "ln2"),
    ("k6", None, None),
    ("scale4ln1", None, None),
    ("pre5", None, None),
    ("attn", 3, None),
    ("attn_logits", 1, None),
    ("query", 0, None),
    ("key", 0, None),
    ("value", 0, None),
    ("mlp_post", 1, None),
    ("resid_pre", 0, None),
    ("resid_mid", 2, None),
    ("resid_post", 1, None),
    ("mlp_out", 0, None),
    ("attn_out", 0, None),
    ("result", 1, None),
    ("z", 0, "attention"),
    ("scale", None, None),
    ("normalized", None, None),
    ("resid_pre", 4, "block"),
    ("rot_q", 1, None),
    ("pre_linear", 0, None),
    ("blocks.0.attn.hook_z", None, None),
    ("hook_pos_embed", None, None),
]


def test_get_act_name_known_answers():
    assert get_act_name("pattern", 0) == "blocks.0.attn.hook_pattern"
    assert get_act_name("scale4ln1") == "blocks.4.ln1.hook_scale"
    assert get_act_name("k6") == "blocks.6.attn.hook_k"
    assert get_act_name("normalized", 27, "ln2") == "blocks.27.ln2.hook_normalized"
    assert get_act_name("scale") == "ln_final.hook_scale"
    assert get_act_name("resid_mid", 2) == "blocks.2.hook_resid_mid"
    assert get_act_name("mlp_out", 0) == "blocks.0.hook_mlp_out"
    with pytest.raises(ValueError, match="non-empty string"):
        get_act_name("")


@pytest.mark.parametrize("name, layer, layer_type", CASES)
def test_get_act_name_equals_transformer_lens(name, layer, layer_type):
    pytest.importorskip("transformer_lens", reason="waits for transformer-lens (pip install transformer-lens)")
    from transformer_lens.utilities import get_act_name as tl_get_act_name

    assert get_act_name(name, layer, layer_type) == tl_get_act_name(name, layer, layer_type)


def _model(preset: str, **kw):
    cfg = anatomy.ModelConfig.from_preset(
        preset, vocab_size=40, d_model=16, n_heads=4, n_layers=2, max_seq_len=16, **kw
    )
    return anatomy.build_model(cfg)


def test_the_table_maps_names_to_our_hook_points_and_says_what_it_refuses():
    gpt2 = tl_points(_model("gpt2"))
    assert gpt2.points["blocks.1.attn.hook_pattern"].source == "stack.blocks.1.attn.hook_weights"
    assert gpt2.points["blocks.0.hook_mlp_out"].source == "stack.blocks.0.hook_ffn_out"
    assert "hook_pos_embed" in gpt2.points and "blocks.0.attn.hook_rot_q" not in gpt2.points
    llama = tl_points(_model("llama", n_kv_heads=2))
    assert llama.points["blocks.0.attn.hook_rot_q"].source == "stack.blocks.0.attn.hook_q"  # ours is after RoPE
    assert llama.points["blocks.0.attn.hook_q"].kind == "unrotated_q"
    assert "hook_pos_embed" not in llama.points and "cos/sin" in llama.refused["blocks.0.attn.hook_cos"]
    bert = tl_points(_model("bert"))  # Post-Norm: the residual between the sub-layers is not TransformerLens's
    assert "Post-Norm" in bert.refused["blocks.0.hook_resid_mid"]
    assert bert.points["blocks.0.ln1.hook_scale"].source == "stack.blocks.0.attn_add_norm.norm.hook_scale"
    assert "Post-Norm" in bert.refused["blocks.0.ln1.hook_normalized"]
    assert "Post-Norm" in bert.refused["blocks.0.hook_attn_out"]
    assert "blocks.0.attn.hook_z" in bert.points
    t5 = tl_points(_model("t5"))
    assert t5.points == {} and "one stack of blocks" in (t5.why_none or "")
