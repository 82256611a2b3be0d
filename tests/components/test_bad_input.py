"""Bad input gets a ValueError/TypeError naming the argument, the value and what was expected."""

from __future__ import annotations

import pytest
import torch

from anatomy import ModelConfig, build_model
from anatomy.components import AddNorm, FeedForward, LayerNorm, MultiHeadAttention
from anatomy.components.inputs import attention_inputs
from anatomy.components.masks import padding_mask
from anatomy.components.positional import RotaryPositional


def attn(**kw):
    return MultiHeadAttention(**{"d_model": 16, "n_heads": 4, **kw})


def test_d_model_not_divisible_by_heads():
    with pytest.raises(ValueError, match=r"d_model=18 must be divisible by n_heads=4"):
        attn(d_model=18)


def test_heads_not_divisible_by_kv_heads():
    with pytest.raises(ValueError, match=r"n_heads=4 must be divisible by n_kv_heads=3"):
        attn(n_kv_heads=3)


def test_odd_head_dim_with_rope():
    with pytest.raises(ValueError, match=r"even head dimension.*Dh=3"):
        RotaryPositional(head_dim=3)
    with pytest.raises(ValueError, match=r"positional='rope' needs an even head dimension"):
        ModelConfig(d_model=12, n_heads=4, positional="rope")


def test_wrong_rank():
    with pytest.raises(ValueError, match=r"x must have 3 dimensions \(B, T, D\), got shape \(10, 16\)"):
        attn()(torch.randn(10, 16))


def test_last_dim_not_d_model():
    with pytest.raises(ValueError, match=r"x must have last dimension d_model=16, got shape \(2, 10, 12\)"):
        attn()(torch.randn(2, 10, 12))


def test_context_with_wrong_width():
    with pytest.raises(ValueError, match=r"context must have last dimension d_model=16"):
        attn()(torch.randn(2, 10, 16), context=torch.randn(2, 5, 8))


def test_mask_of_wrong_shape():
    with pytest.raises(ValueError, match=r"mask of shape \(2, 7\) does not broadcast to \(B=2, H=4, T=10, S=10\)"):
        attention_inputs(attn(), torch.randn(2, 10, 16), mask=torch.ones(2, 7, dtype=torch.bool))


def test_mask_of_non_bool_dtype_hints_from_additive():
    with pytest.raises(TypeError, match=r"mask must be a boolean mask.*float32.*masks.from_additive"):
        attention_inputs(attn(), torch.randn(2, 10, 16), mask=torch.zeros(10, 10))


def test_sequence_longer_than_learned_table():
    model = build_model(ModelConfig(vocab_size=20, d_model=16, n_heads=2, max_seq_len=8, positional="learned"))
    with pytest.raises(ValueError, match=r"position 8 is past the learned positional table \(max_seq_len=8\)"):
        model(torch.ones(1, 9, dtype=torch.long))


@pytest.mark.parametrize(
    "field, value, listed",
    [
        ("positional", "cosine", "alibi, learned, none, rope, shaw, sinusoidal, t5"),
        ("norm", "groupnorm", "batchnorm, layernorm, rmsnorm"),
        ("norm_position", "middle", "deepnorm, post, pre, sandwich"),
        ("activation", "tanh", "geglu, geglu_tanh, gelu, gelu_tanh, relu, relu2, silu, swiglu"),
        ("kernel", "flash", "auto, loop, math, sdpa"),
        ("architecture", "rnn", "classifier, decoder_lm, encoder, seq2seq"),
    ],
)
def test_unknown_names_list_the_valid_ones(field, value, listed):
    with pytest.raises(ValueError, match=rf"unknown {field} '{value}'; valid names: {listed}"):
        ModelConfig(**{field: value})


def test_unknown_preset_lists_the_valid_ones():
    names = "bert, gpt2, llama, qwen3, seed-block, t5, vaswani-2017"
    with pytest.raises(ValueError, match=rf"unknown preset 'gpt5'; valid names: {names}"):
        ModelConfig.from_preset("gpt5")


def test_unknown_names_at_the_component_level():
    with pytest.raises(ValueError, match=r"unknown kernel 'flash'; valid names: auto, loop, math, sdpa"):
        attn(kernel="flash")
    with pytest.raises(ValueError, match=r"unknown activation 'tanh'"):
        FeedForward(d_model=8, activation="tanh")
    with pytest.raises(ValueError, match=r"unknown norm_position 'middle'"):
        AddNorm(8, placement="middle", make_norm=LayerNorm)


def test_lengths_larger_than_the_sequence():
    with pytest.raises(ValueError, match=r"lengths must lie in \[0, max_len=5\], got min 2, max 7"):
        padding_mask([2, 7], 5)


def test_token_ids_out_of_vocabulary():
    model = build_model(ModelConfig(vocab_size=20, d_model=16, n_heads=2))
    with pytest.raises(ValueError, match=r"input_ids holds token id 20, outside \[0, vocab_size=20\)"):
        model(torch.tensor([[1, 20]]))
    with pytest.raises(TypeError, match=r"input_ids must hold integer token ids, got dtype torch.float32"):
        model(torch.ones(1, 3))


def test_attention_mask_must_be_zero_one_and_the_right_shape():
    model = build_model(ModelConfig(vocab_size=20, d_model=16, n_heads=2))
    ids = torch.ones(2, 4, dtype=torch.long)
    with pytest.raises(ValueError, match=r"attention_mask must have shape \(B=2, S=4\), got \(2, 3\)"):
        model(ids, torch.ones(2, 3, dtype=torch.long))
    with pytest.raises(TypeError, match=r"attention_mask must be bool or integer 0/1"):
        model(ids, torch.ones(2, 4))


def test_wrong_config_types_and_fields():
    with pytest.raises(TypeError, match=r"d_model must be int, got '16' \(str\)"):
        ModelConfig(d_model="16")
    with pytest.raises(ValueError, match=r"unknown config field\(s\) heads; valid fields: "):
        ModelConfig.from_preset("gpt2", heads=4)
    with pytest.raises(ValueError, match=r"dropout must be in \[0, 1\), got 1.5"):
        ModelConfig(dropout=1.5)
