"""anatomy.inspection.tl_weights: TransformerLens's weight names in its shapes, computed from our parameters."""

from __future__ import annotations

import pytest
import torch

import anatomy


def _model(preset: str, **kw):
    torch.manual_seed(0)
    cfg = anatomy.ModelConfig.from_preset(
        preset, vocab_size=40, d_model=16, n_heads=4, n_layers=2, max_seq_len=16, **kw
    )
    return anatomy.build_model(cfg).eval()


def test_per_head_weights_rebuild_the_attention_output():
    model = _model("gpt2")  # fused qkv_proj: W_Q/W_K/W_V are its row blocks
    x = torch.randn(1, 5, 16)
    attn = model.stack.blocks[1].attn
    q = torch.einsum("btd,hdk->bthk", x, model.W_Q[1]) + model.b_Q[1]  # (B, T, H, Dh)
    torch.testing.assert_close(q.flatten(2), attn.qkv_proj(x)[..., :16], atol=1e-6, rtol=0)
    z = torch.randn(1, 5, 4, 4)  # (B, T, H, Dh)
    out = torch.einsum("bthk,hkd->btd", z, model.W_O[1]) + model.b_O[1]
    torch.testing.assert_close(out, attn.o_proj(z.flatten(2)), atol=1e-6, rtol=0)
    assert model.W_U.shape == (16, 40) and torch.equal(model.W_U, model.lm_head.weight.T)
    assert torch.equal(model.b_U, torch.zeros(40))  # no head bias: zeros, as TransformerLens
    assert model.W_pos.shape == (16, 16) and model.W_in.shape == (2, 16, 64) and model.W_out.shape == (2, 64, 16)
    model.W_Q.sum().backward()  # computed from the parameters: gradients reach them
    assert attn.qkv_proj.weight.grad is not None


def test_gqa_keys_are_per_key_value_head_and_absent_biases_are_refused():
    model = _model("llama", n_kv_heads=2)
    assert model.W_Q.shape == (2, 4, 16, 4) and model.W_K.shape == (2, 2, 16, 4) and model.W_V.shape == (2, 2, 16, 4)
    assert model.W_gate.shape == (2, 16, model.stack.blocks[0].ffn.d_ff)
    for name in ("b_Q", "b_K", "b_O", "b_in", "b_out"):
        with pytest.raises(ValueError, match=f"{name}: this model's layers have no such bias"):
            getattr(model, name)
    with pytest.raises(ValueError, match="no learned positions table"):
        _ = model.W_pos


def test_models_without_the_part_say_so():
    with pytest.raises(ValueError, match="has no unembedding"):
        _ = _model("bert").W_U
    with pytest.raises(ValueError, match="not gated"):
        _ = _model("gpt2").W_gate
    with pytest.raises(ValueError, match="no single stack of blocks"):
        _ = _model("t5").W_Q
