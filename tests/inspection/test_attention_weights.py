"""Weights recomputed beside the fused kernel equal the math kernel's weights (≤ 1e-6), while SDPA keeps running."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import anatomy
from anatomy.components import kernels
from anatomy.inspection import attention_modules, attention_weights

SMALL = dict(vocab_size=100, d_model=32, n_heads=4, n_layers=2, d_ff=64)
CASES = {
    "seed-block, padding": ("seed-block", {}),
    "gpt2, causal + padding": ("gpt2", SMALL),
    "llama, RoPE + GQA": ("llama", {**SMALL, "n_kv_heads": 2}),
    "llama, interleaved RoPE, MQA": ("llama", {**SMALL, "n_kv_heads": 1, "rope_layout": "interleaved"}),
    "ALiBi, causal": ("gpt2", {**SMALL, "positional": "alibi"}),
    "ALiBi, 6 heads (not a power of 2)": ("seed-block", {"d_model": 24, "n_heads": 6, "positional": "alibi"}),
    "T5 bias, encoder + decoder + cross": ("t5", SMALL),
    "seq2seq, sinusoidal": ("vaswani-2017", {**SMALL, "dropout": 0.0}),
    "sliding window 3, causal + padding": ("llama", {**SMALL, "n_kv_heads": 2, "sliding_window": 3}),
    "sliding window 2, encoder (a symmetric band)": ("seed-block", {"sliding_window": 2}),
    "qwen3: QK-norm, heads of 12 on d_model 32": ("qwen3", {**SMALL, "n_kv_heads": 2, "head_dim": 12}),
}


def _model(preset, overrides):
    torch.manual_seed(0)
    config = anatomy.ModelConfig.from_preset(preset, **overrides)
    return anatomy.build_model(config).eval(), config


def _inputs(config, left_pad=False):
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(1, config.vocab_size, (3, 9), generator=g)
    mask = torch.ones(3, 9, dtype=torch.long)
    if left_pad:
        mask[1, :4] = 0
        mask[2, :] = 0  # an all-padding row: fully masked, must give zeros, not NaN
        mask[2, -1] = 1
    else:
        mask[1, 6:] = 0
    inputs = {"input_ids": ids, "attention_mask": mask}
    if config.architecture == "seq2seq":
        inputs["decoder_input_ids"] = ids[:, :7]
    return inputs


def _reference(model, config, inputs):
    out = model(**inputs, output_attentions=True)  # need_weights: every layer takes the math kernel
    if config.architecture == "seq2seq":
        pairs = [w for pair in zip(out.decoder_attentions, out.cross_attentions) for w in pair]
        return list(out.encoder_attentions) + pairs
    return list(out.attentions)


@pytest.fixture
def sdpa_calls(monkeypatch):
    calls = []
    real = F.scaled_dot_product_attention

    def spy(*args, **kwargs):
        calls.append(args[0].shape)
        return real(*args, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
    return calls


@pytest.mark.parametrize("left_pad", [False, True], ids=["right-pad", "left-pad"])
@pytest.mark.parametrize("case", list(CASES))
def test_recomputed_weights_equal_the_math_kernel(case, left_pad, sdpa_calls):
    model, config = _model(*CASES[case])
    inputs = _inputs(config, left_pad)
    n = len(attention_modules(model))
    with torch.no_grad(), attention_weights(model) as maps:
        model(**inputs)
    assert len(sdpa_calls) == n, "the model must keep running the fused kernel"
    sdpa_calls.clear()
    with torch.no_grad():
        reference = _reference(model, config, inputs)
    assert not sdpa_calls  # the reference really is the math path
    assert sorted(maps) == list(range(n)) == list(range(len(reference)))
    for i, ref in enumerate(reference):
        got = maps[i].weights
        assert got.shape == ref.shape
        assert not got.isnan().any()
        torch.testing.assert_close(got, ref, atol=1e-6, rtol=0)


def test_selected_layers_and_heads_and_gqa_mapping(sdpa_calls):
    model, config = _model("llama", {**SMALL, "n_kv_heads": 2})
    inputs = _inputs(config)
    with torch.no_grad(), attention_weights(model, layers=[1], heads=[3, 0]) as maps:
        model(**inputs)
    assert set(maps) == {1} and maps[1].heads == (3, 0) and maps[1].name == "stack.blocks.1.attn"
    reference = _reference(model, config, inputs)[1]
    torch.testing.assert_close(maps[1].weights, reference[:, [3, 0]], atol=1e-6, rtol=0)
    entropy = maps[1].entropy()
    assert entropy.shape == (2,) and bool(((entropy > 0) & (entropy <= torch.log(torch.tensor(9.0)) + 1e-6)).all())


def test_weights_follow_the_kv_cache_during_decoding():
    model, config = _model("llama", {**SMALL, "n_kv_heads": 2})
    ids = torch.randint(1, 100, (2, 6), generator=torch.Generator().manual_seed(5))
    caches = model.new_caches()
    with torch.no_grad():
        model(ids[:, :5], kv_caches=caches)
        with attention_weights(model, layers=[0]) as maps:
            model(ids[:, 5:], kv_caches=caches)  # one new query over 6 cached keys
        full = model(ids, output_attentions=True).attentions[0][:, :, -1:]
    assert maps[0].weights.shape == (2, 4, 1, 6)
    torch.testing.assert_close(maps[0].weights, full, atol=1e-6, rtol=0)


def test_math_attention_is_what_recomputes(monkeypatch):
    model, config = _model("seed-block", {})
    seen = []
    real = kernels.math_attention

    def spy(q, k, v, args):
        seen.append(args.need_weights)
        return real(q, k, v, args)

    monkeypatch.setattr(kernels, "math_attention", spy)
    with torch.no_grad(), attention_weights(model) as maps:
        model(**_inputs(config))
    assert seen == [True] and maps[0].weights.shape == (3, 4, 9, 9)


def test_bad_layer_and_head_numbers_name_the_argument():
    model, _ = _model("seed-block", {})
    with pytest.raises(ValueError, match=r"layers holds 3.*has 1 \(valid: 0..0\)"):
        with attention_weights(model, layers=[3]):
            pass
    with pytest.raises(ValueError, match=r"heads holds 4.*has 4 \(valid: 0..3\)"):
        with attention_weights(model, heads=[0, 4]):
            pass
    with pytest.raises(ValueError, match="heads must name at least one"):
        with attention_weights(model, heads=[]):
            pass


@pytest.mark.parametrize(
    "preset,overrides",
    [("llama", {**SMALL, "n_kv_heads": 2, "sliding_window": 3}), ("seed-block", {"sliding_window": 2})],
)
def test_window_maps_without_a_padding_mask_and_a_subset_of_heads(preset, overrides):
    """No attention_mask at all: the band is the only mask (it once reached the head selection as a 2-D tensor)."""
    model, config = _model(preset, overrides)
    ids = torch.randint(1, config.vocab_size, (2, 7), generator=torch.Generator().manual_seed(0))
    with torch.no_grad(), attention_weights(model, layers=[0], heads=[2, 1]) as maps:
        model(ids)
    w = maps[0].weights  # (B, 2, T, T)
    window = config.sliding_window
    offsets = torch.arange(7)[:, None] - torch.arange(7)[None, :]  # i - j
    outside = offsets >= window if preset == "llama" else offsets.abs() >= window
    if preset == "llama":
        outside = outside | (offsets < 0)  # causal too
    assert w.shape == (2, 2, 7, 7) and torch.all(w[..., outside] == 0)
    torch.testing.assert_close(w.sum(-1), torch.ones(2, 2, 7))
