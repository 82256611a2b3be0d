"""Norms, Add & Norm placements, FFN widths, embeddings and positional schemes: numbers, not just shapes."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from anatomy.components import (
    AddNorm,
    FeedForward,
    LayerNorm,
    RMSNorm,
    TokenBatchNorm,
    deepnorm_constants,
    default_d_ff,
)
from anatomy.components.embedding import TokenEmbedding, make_lm_head
from anatomy.components.inputs import attention_inputs
from anatomy.components.masks import (
    causal_mask,
    from_additive,
    from_torch_nn,
    padding_mask,
    padding_mask_from_ids,
    positions_from_mask,
    sliding_window_mask,
    to_additive,
    to_torch_nn,
)
from anatomy.components.positional import alibi_slopes, sinusoidal_table, t5_bucket


def test_layernorm_matches_torch_and_keeps_float32_statistics_under_bf16():
    x = torch.randn(2, 5, 16) * 3 + 1
    ln = LayerNorm(16, eps=1e-5)
    torch.nn.init.normal_(ln.weight)
    torch.nn.init.normal_(ln.bias)
    ref = F.layer_norm(x, (16,), ln.weight, ln.bias, 1e-5)
    assert torch.allclose(ln(x), ref, atol=1e-6)
    xb = (x * 1000).bfloat16()
    out = ln(xb)
    assert out.dtype == torch.bfloat16
    ref_b = F.layer_norm(xb.float(), (16,), ln.weight, ln.bias, 1e-5)
    assert (out.float() - ref_b).abs().max() < 0.05


def test_rmsnorm_formula():
    x = torch.randn(3, 4, 8, dtype=torch.float64)
    n = RMSNorm(8, eps=1e-6).double()
    torch.nn.init.normal_(n.weight)
    ref = n.weight * x / torch.sqrt((x**2).mean(-1, keepdim=True) + 1e-6)
    assert torch.allclose(n(x), ref, atol=1e-12)


def test_batchnorm_mixes_tokens_of_other_sentences_layernorm_does_not():
    x = torch.randn(4, 6, 8)
    y = x.clone()
    y[1:] *= 10  # other sentences change
    bn, ln = TokenBatchNorm(8).train(), LayerNorm(8)
    assert not torch.allclose(bn(x)[0], bn(y)[0], atol=1e-3)
    assert torch.allclose(ln(x)[0], ln(y)[0])


@pytest.mark.parametrize("placement", ["post", "pre", "sandwich", "deepnorm"])
def test_add_norm_placements_compute_their_formula(placement):
    torch.manual_seed(0)
    x, fx = torch.randn(2, 3, 8), torch.randn(2, 3, 8)
    an = AddNorm(8, placement=placement, make_norm=LayerNorm, alpha=1.7)
    for p in an.parameters():
        torch.nn.init.normal_(p)
    h = an.before(x)
    out = an.after(x, fx)
    if placement == "post":
        assert torch.equal(h, x) and torch.allclose(out, an.norm(x + fx))
    elif placement == "pre":
        assert torch.allclose(h, an.norm(x)) and torch.allclose(out, x + fx)
    elif placement == "sandwich":
        assert torch.allclose(h, an.pre_norm(x)) and torch.allclose(out, x + an.post_norm(fx))
        assert an.pre_norm.weight is not an.post_norm.weight
    else:
        assert torch.equal(h, x) and torch.allclose(out, an.norm(1.7 * x + fx))


def test_deepnorm_constants_from_the_paper():
    enc = deepnorm_constants(n_encoder_layers=6)["encoder"]
    assert enc == pytest.approx(((12) ** 0.25, (48) ** -0.25))
    ed = deepnorm_constants(6, 6)
    assert ed["encoder"] == pytest.approx((0.81 * (6**5) ** (1 / 16), 0.87 * (6**5) ** (-1 / 16)))
    assert ed["decoder"] == pytest.approx((18**0.25, 72**-0.25))


def test_ffn_widths_and_swiglu_formula():
    assert default_d_ff(512, "relu") == 2048
    assert default_d_ff(512, "swiglu") == 1368  # 2/3 * 4 * 512 = 1365.3, rounded up to a multiple of 8
    ffn = FeedForward(d_model=8, activation="swiglu").double()
    x = torch.randn(2, 3, 8, dtype=torch.float64)
    ref = ffn.down_proj(F.silu(ffn.gate_proj(x)) * ffn.up_proj(x))
    assert torch.allclose(ffn(x), ref)
    relu = FeedForward(d_model=8, d_ff=20, activation="relu")
    assert relu.up_proj.out_features == 20 and not hasattr(relu, "gate_proj")


def test_relu2_is_the_square_of_relu():
    """Primer's squared ReLU (Nemotron, Arcee, nanochat): not gated, 4 D wide."""
    assert default_d_ff(512, "relu2") == 2048
    ffn = FeedForward(d_model=8, activation="relu2").double()
    assert not ffn.gated
    x = torch.randn(2, 3, 8, dtype=torch.float64)
    h = ffn.up_proj(x)
    assert torch.allclose(ffn(x), ffn.down_proj(torch.where(h > 0, h * h, torch.zeros_like(h))), atol=1e-12)


def test_geglu_tanh_is_a_tanh_gelu_gate():
    assert default_d_ff(512, "geglu_tanh") == 1368  # gated: the 2/3 * 4 * D rule
    torch.manual_seed(0)
    ffn = FeedForward(d_model=8, d_ff=16, activation="geglu_tanh").double()
    assert ffn.gated and ffn.gate_proj.out_features == 16
    x = torch.randn(2, 3, 8, dtype=torch.float64)
    gate, up = ffn.gate_proj(x), ffn.up_proj(x)
    # the tanh approximation written out (Hendrycks & Gimpel 2016; HF's "gelu_new")
    gelu_tanh = 0.5 * gate * (1 + torch.tanh(math.sqrt(2 / math.pi) * (gate + 0.044715 * gate**3)))
    assert torch.allclose(ffn(x), ffn.down_proj(gelu_tanh * up), atol=1e-12)
    assert not torch.allclose(ffn(x), ffn.down_proj(F.gelu(gate) * up), atol=1e-6)  # not the erf GELU ("geglu")


def test_embedding_scale_and_tied_head():
    emb = TokenEmbedding(10, 16, scale=True)
    ids = torch.tensor([[1, 2]])
    assert torch.allclose(emb(ids), emb.weight[ids] * 4.0)
    head = make_lm_head(emb, tie=True)
    assert head.weight is emb.weight
    assert make_lm_head(emb, tie=False).weight is not emb.weight


def test_sliding_window_mask_is_a_bottom_right_band():
    assert sliding_window_mask(4, 4, 2).int().tolist() == [[1, 0, 0, 0], [1, 1, 0, 0], [0, 1, 1, 0], [0, 0, 1, 1]]
    assert sliding_window_mask(1, 6, 3).int().tolist() == [[0, 0, 0, 1, 1, 1]]  # one decode query: the last 3
    assert sliding_window_mask(3, 3, 2, causal=False).int().tolist() == [[1, 1, 0], [1, 1, 1], [0, 1, 1]]
    assert torch.equal(sliding_window_mask(5, 7, 7), causal_mask(5, 7))  # a window as long as the keys: causal
    with pytest.raises(ValueError, match="window must be a positive integer, got 0"):
        sliding_window_mask(3, 3, 0)


def test_mask_conversions_round_trip():
    m = torch.tensor([[True, False, True]])
    add = to_additive(m)
    assert add.tolist() == [[0.0, float("-inf"), 0.0]]
    assert torch.equal(from_additive(add), m)
    assert torch.equal(from_additive(torch.tensor([[0.0, -1e9, -10000.0]])), torch.tensor([[True, False, False]]))
    assert torch.equal(to_torch_nn(m), ~m) and torch.equal(from_torch_nn(~m), m)
    assert padding_mask([2, 0], 3).tolist() == [[True, True, False], [False, False, False]]
    ids = torch.tensor([[0, 0, 5, 6], [5, 6, 7, 0]])
    pm = padding_mask_from_ids(ids, pad_id=0)
    assert positions_from_mask(pm).tolist() == [[0, 0, 0, 1], [0, 1, 2, 2]]


def test_sinusoidal_table_values():
    pe = sinusoidal_table(torch.arange(3), 4)
    assert pe[1].tolist() == pytest.approx([math.sin(1), math.cos(1), math.sin(1e-2), math.cos(1e-2)])


def test_alibi_slopes_from_the_paper():
    assert alibi_slopes(8).tolist() == pytest.approx([2 ** -(i + 1) for i in range(8)])
    six = alibi_slopes(6).tolist()  # 4 slopes of the 4-head series, then every other slope of the 8-head one
    assert six == pytest.approx([2**-2, 2**-4, 2**-6, 2**-8, 2**-1, 2**-3])


def test_t5_buckets():
    rel = torch.arange(-200, 201)
    b = t5_bucket(rel, bidirectional=True, num_buckets=32, max_distance=128)
    assert b.min() >= 0 and b.max() <= 31
    assert b[200].item() == 0 and b[201].item() == 17 and b[199].item() == 1  # 0, +1 (upper half), -1
    assert b[0].item() == 15 and b[-1].item() == 31  # far past / far future share the last bucket
    uni = t5_bucket(rel, bidirectional=False, num_buckets=32, max_distance=128)
    assert (uni[201:] == 0).all() and uni[199].item() == 1 and uni[0].item() == 31


@pytest.mark.parametrize(
    "cls, kwargs",
    [
        ("SinusoidalPositional", dict(d_model=8)),
        ("LearnedPositional", dict(d_model=8, max_seq_len=4)),
        ("ShawRelativePositional", dict(head_dim=4)),
        ("T5RelativeBias", dict(n_heads=2)),
        ("RotaryPositional", dict(head_dim=4)),
        ("ALiBiPositional", dict(n_heads=2)),
        ("NoPositional", {}),
    ],
)
def test_a_misspelt_positional_argument_raises(cls, kwargs):
    """No scheme swallows what it does not take (they once ended in ``**_``): ``bsae=`` for ``base=`` is an error."""
    from anatomy.components import positional

    scheme = getattr(positional, cls)
    scheme(**kwargs)  # the spelling it takes
    with pytest.raises(TypeError, match="bsae"):
        scheme(**kwargs, bsae=500000.0)


def test_b_equal_t_a_key_padding_mask_has_its_own_argument():
    """With B == T a 2-D ``mask`` is still ``(T, S)``; a ``(B, S)`` padding mask goes to ``key_padding_mask`` and
    equals its explicit ``(B, 1, 1, S)`` form, alone and combined with a ``(T, S)`` mask."""
    from anatomy.components import MultiHeadAttention
    from anatomy.components.masks import causal_mask, combine, key_padding_to_attention, padding_mask

    torch.manual_seed(0)
    m = MultiHeadAttention(d_model=8, n_heads=2, kernel="math").eval()
    x = torch.randn(4, 4, 8)  # B == T == 4
    pad = padding_mask(torch.tensor([4, 3, 2, 1]), 4)  # (B, S)
    explicit, _ = m(x, ctx=attention_inputs(m, x, mask=key_padding_to_attention(pad)))
    given, _ = m(x, ctx=attention_inputs(m, x, key_padding_mask=pad))
    as_ts, _ = m(x, ctx=attention_inputs(m, x, mask=pad))  # read as (T, S): a different mask, by definition
    assert torch.equal(given, explicit) and not torch.allclose(as_ts, explicit)
    both, _ = m(x, ctx=attention_inputs(m, x, mask=causal_mask(4), key_padding_mask=pad))
    want, _ = m(x, ctx=attention_inputs(m, x, mask=combine(causal_mask(4)[None, None], key_padding_to_attention(pad))))
    assert torch.equal(both, want)
    with pytest.raises(ValueError, match=r"key_padding_mask must have shape \(B=4, S=4\)"):
        m(x, ctx=attention_inputs(m, x, key_padding_mask=pad[:, :3]))
