"""The component options the newer Hugging Face families need (docs/interop.md): logit soft-capping in the
kernels, RMSNorm's weight offset, the parallel residual, partial rotary and RoPE scaling, q/k/v-only bias, and the
ModelConfig fields that select them (each bad value named)."""

from __future__ import annotations

import math

import pytest
import torch

from anatomy import ModelConfig, build_model
from anatomy.components import kernels
from anatomy.components.attention import MultiHeadAttention
from anatomy.components.block import EncoderBlock
from anatomy.components.inputs import attention_inputs
from anatomy.components.norms import RMSNorm
from anatomy.components.positional import RopeScaling, RotaryPositional, apply_rope, rope_angles

G = torch.Generator().manual_seed(0)


def _qkv(b=2, h=4, hkv=2, t=5, s=5, dh=8):
    return (
        torch.randn(b, h, t, dh, generator=G, dtype=torch.float64) * 3,
        torch.randn(b, hkv, s, dh, generator=G, dtype=torch.float64) * 3,
        torch.randn(b, hkv, s, dh, generator=G, dtype=torch.float64),
    )


def test_soft_capped_scores_are_bounded_and_equal_in_math_and_loop():
    q, k, v = _qkv()
    mask = torch.rand(2, 1, 5, 5, generator=G) > 0.3
    seen = {}
    out, w = kernels.math_attention(
        q,
        k,
        v,
        kernels.AttentionArgs(
            mask=mask, scale=0.5, softcap=2.0, need_weights=True, score_hook=lambda x: seen.setdefault("scores", x)
        ),
    )
    assert seen["scores"].abs().max() < 2.0  # every logit inside (-cap, cap)
    ref_scores = torch.tanh(q @ kernels.repeat_kv(k, 4).transpose(-2, -1) * 0.5 / 2.0) * 2.0
    assert torch.allclose(seen["scores"], ref_scores)
    loop, wl = kernels.loop_attention(
        q, k, v, kernels.AttentionArgs(mask=mask, scale=0.5, softcap=2.0, need_weights=True)
    )
    assert torch.allclose(out, loop) and torch.allclose(w, wl)
    plain, _ = kernels.math_attention(q, k, v, kernels.AttentionArgs(mask=mask, scale=0.5))
    assert (plain - out).abs().max() > 1e-2  # the cap changes the answer on these scores


def test_sdpa_refuses_soft_capping_and_auto_picks_math():
    q, k, v = _qkv()
    with pytest.raises(ValueError, match="cannot soft-cap attention logits"):
        kernels.sdpa_attention(q, k, v, kernels.AttentionArgs(scale=0.5, softcap=2.0))
    assert kernels.resolve("auto", need_weights=False, value_bias=False, hooked=False, softcap=True).name == "math"
    with pytest.raises(ValueError, match="kernel='sdpa' cannot soft-cap"):
        kernels.resolve("sdpa", need_weights=False, value_bias=False, hooked=False, softcap=True)
    attn = MultiHeadAttention(d_model=16, n_heads=4, softcap=1.5).double()
    x = torch.randn(2, 6, 16, generator=G, dtype=torch.float64) * 5
    a, _ = attn(x, ctx=attention_inputs(attn, x, is_causal=True))
    attn.kernel = "loop"
    assert torch.allclose(a, attn(x, ctx=attention_inputs(attn, x, is_causal=True))[0])
    with pytest.raises(ValueError, match="softcap must be > 0"):
        MultiHeadAttention(d_model=16, n_heads=4, softcap=0.0)


def test_qkv_bias_without_an_output_bias():
    attn = MultiHeadAttention(d_model=16, n_heads=4, bias=False, qkv_bias=True)
    assert all(getattr(attn, p).bias is not None for p in ("q_proj", "k_proj", "v_proj"))
    assert attn.o_proj.bias is None
    fused = MultiHeadAttention(d_model=16, n_heads=4, bias=True, qkv_bias=False, fused_qkv=True)
    assert fused.qkv_proj.bias is None and fused.o_proj.bias is not None


def test_rmsnorm_offset_scales_by_offset_plus_weight_and_starts_at_one():
    x = torch.randn(3, 8, generator=G, dtype=torch.float64)
    plain, gemma = RMSNorm(8).double(), RMSNorm(8, offset=1.0).double()
    assert torch.equal(gemma.weight, torch.zeros(8, dtype=torch.float64))
    assert torch.allclose(gemma(x), plain(x))  # both scale by 1 when fresh
    with torch.no_grad():
        gemma.weight.fill_(0.5)
        plain.weight.fill_(1.5)
    assert torch.allclose(gemma(x), plain(x))


def test_parallel_residual_adds_both_sublayers_to_the_block_input():
    torch.manual_seed(0)
    block = EncoderBlock.build(d_model=16, n_heads=4, d_ff=32, placement="pre", parallel_residual=True).double()
    x = torch.randn(2, 5, 16, generator=G, dtype=torch.float64)
    out, _ = block(x, ctx=attention_inputs(block, x, is_causal=True))
    h = block.attn_add_norm.norm(x)
    a, _ = block.attn(h, attention_inputs(block.attn, h, is_causal=True))
    expected = x + a + block.ffn(block.ffn_add_norm.norm(x))
    assert torch.allclose(out, expected)
    block.parallel_residual = False
    assert (block(x, ctx=attention_inputs(block, x, is_causal=True))[0] - out).abs().max() > 1e-3
    with pytest.raises(ValueError, match="parallel_residual needs norm_position='pre'"):
        EncoderBlock.build(d_model=16, n_heads=4, placement="post", parallel_residual=True)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_partial_rotary_rotates_the_first_dims_only(layout):
    x = torch.randn(2, 3, 7, 16, generator=G, dtype=torch.float64)
    pos = torch.arange(7)[None]
    rope = RotaryPositional(head_dim=16, rotary_dim=4, layout=layout)
    q, k = rope.rotate(x, x, pos, pos)
    assert torch.equal(q[..., 4:], x[..., 4:])  # the pass-through dims are untouched
    assert torch.allclose(q[..., :4], apply_rope(x[..., :4], rope_angles(pos, 4, 10000.0, torch.float64), layout))
    assert (q[..., :4] - x[..., :4]).abs().max() > 0.1
    with pytest.raises(ValueError, match="rotary_dim must be an even number in \\[2, head_dim=16\\], got 5"):
        RotaryPositional(head_dim=16, rotary_dim=5)


def test_rope_scalings_keep_relative_position_and_stretch_the_angles():
    q = torch.randn(1, 1, 1, 16, generator=G, dtype=torch.float64).expand(1, 1, 2, 16)  # one vector, twice
    k = torch.randn(1, 1, 1, 16, generator=G, dtype=torch.float64).expand(1, 1, 2, 16)
    for kind in ("linear", "llama3", "yarn", "dynamic"):
        rope = RotaryPositional(head_dim=16, scaling=RopeScaling(kind, factor=4.0, original_max_len=16), max_seq_len=16)
        # the same offset 5 at two absolute positions, in one call (17 long: past max_seq_len, dynamic grows)
        qr, kr = rope.rotate(q, k, torch.tensor([[8, 16]]), torch.tensor([[3, 11]]))
        scores = (qr * kr).sum(-1).flatten().tolist()
        assert math.isclose(*scores, rel_tol=1e-9), kind
    linear = RotaryPositional(head_dim=16, scaling=RopeScaling("linear", factor=4.0)).angles(
        torch.tensor([[8]]), torch.float64
    )[0]
    plain = rope_angles(torch.tensor([[2]]), 16, 10000.0, torch.float64)
    assert torch.allclose(linear, plain)  # position 8 stretched by 4 turns like position 2
    yarn = RotaryPositional(head_dim=16, scaling=RopeScaling("yarn", factor=4.0, original_max_len=16))
    assert math.isclose(yarn.angles(torch.tensor([[1]]), torch.float32)[1], 0.1 * math.log(4.0) + 1.0)


@pytest.mark.parametrize(
    "fields, words",
    [
        (dict(rope_scaling="ntk"), "rope_scaling"),
        (dict(rope_scaling="linear", positional="sinusoidal"), "needs positional='rope'"),
        (dict(rope_factor=2.0), "rope_factor=2.0 needs rope_scaling"),
        (dict(rope_scaling="linear", rope_factor=0.5), "rope_factor must be a finite number >= 1"),
        (
            dict(rope_scaling="llama3", rope_factor=8.0, rope_low_freq_factor=4.0, rope_high_freq_factor=1.0),
            "rope_high_freq_factor > rope_low_freq_factor",
        ),
        (
            dict(rope_scaling="yarn", rope_factor=2.0, rope_beta_fast=1.0, rope_beta_slow=2.0),
            "rope_beta_fast > rope_beta_slow",
        ),
        (dict(rope_scaling="yarn", rope_factor=2.0, rope_attention_factor=0.0), "rope_attention_factor must be > 0"),
        (dict(rope_original_max_len=0), "rope_original_max_len must be a positive integer"),
        (dict(rope_fraction=0.0), "rope_fraction must be in (0, 1]"),
        (dict(rope_fraction=0.1), "rotates int(Dh * rope_fraction) = 0 dims of Dh=8"),
        (dict(rope_fraction=0.5, positional="learned"), "rope_fraction=0.5 needs positional='rope'"),
        (dict(parallel_residual=True, norm_position="post"), "parallel_residual=True needs norm_position='pre'"),
        (dict(norm_weight_offset=1.0, norm="layernorm"), "norm_weight_offset=1.0 needs norm='rmsnorm'"),
        (dict(attn_softcap=-1.0), "attn_softcap must be a positive number"),
        (dict(attn_softcap=30.0, kernel="sdpa"), "attn_softcap=30.0 needs a kernel that materialises the scores"),
        (dict(final_logit_softcap=30.0, architecture="encoder"), "final_logit_softcap needs architecture='decoder_lm'"),
    ],
)
def test_bad_family_fields_are_named(fields, words):
    base = dict(d_model=32, n_heads=4, positional="rope", norm="rmsnorm")
    with pytest.raises(ValueError) as info:
        ModelConfig(**{**base, **fields})
    assert words in str(info.value)


def test_final_logit_softcap_bounds_the_model_logits():
    torch.manual_seed(0)
    cfg = ModelConfig(d_model=32, n_heads=4, n_layers=1, vocab_size=50, positional="rope", init_std=1.0)
    ids = torch.randint(0, 50, (2, 6))
    free = build_model(cfg).eval()
    capped = build_model(cfg.replace(final_logit_softcap=2.0)).eval()
    capped.load_state_dict(free.state_dict())
    a, b = free(ids).logits, capped(ids).logits
    assert a.abs().max() > 2.0 and b.abs().max() <= 2.0
    assert torch.allclose(b, torch.tanh(a / 2.0) * 2.0)


def test_recomputed_attention_maps_of_a_soft_capped_model_are_the_kernel_weights():
    from anatomy.inspection.weights import attention_weights

    torch.manual_seed(0)
    cfg = ModelConfig(
        d_model=32,
        n_heads=4,
        n_layers=1,
        vocab_size=50,
        positional="rope",
        norm="rmsnorm",
        attn_softcap=1.0,
        init_std=0.5,
    )
    model = build_model(cfg).eval()
    ids = torch.randint(0, 50, (2, 6))
    with attention_weights(model) as maps:
        model(ids)
    returned = model(ids, output_attentions=True).attentions[0]  # the math kernel's own weights
    assert torch.allclose(maps[0].weights, returned, atol=1e-6)
    model.stack.blocks[0].attn.softcap = None  # without the cap the maps differ: the cap is in the recomputation
    assert (model(ids, output_attentions=True).attentions[0] - returned).abs().max() > 1e-3
