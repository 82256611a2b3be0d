"""anatomy.inspection.tl_surface and hooked's TransformerLens arguments: hook_dict, mod_dict, add_hook, reset_hooks,
return_type and text input, against TransformerLens 4.3's own ``TransformerBridge`` on the same weights (the
``tl_pair`` fixture of conftest.py)."""

from __future__ import annotations

import pytest
import torch

import anatomy

pytest.importorskip("transformers", reason="waits for transformers (pip install transformers)")
pytest.importorskip("transformer_lens", reason="waits for transformer-lens (pip install transformer-lens)")

ATOL = 1e-5


@pytest.fixture(scope="module")
def pair(tl_pair):
    return tl_pair


def test_hook_dict_holds_transformer_lens_names_and_refuses_the_rest_with_a_reason(pair):
    ours, bridge, _ = pair
    mine = ours.hook_dict
    assert set(mine) <= set(bridge.hook_dict)  # one name per point, TransformerLens's
    assert {"hook_embed", "blocks.1.attn.hook_z", "blocks.0.hook_resid_post", "ln_final.hook_scale"} <= set(mine)
    assert not any(name.startswith("stack.") for name in mine)
    for name in set(bridge.hook_dict) - set(mine):
        with pytest.raises(KeyError) as err:
            mine[name]
        why = str(err.value)
        assert "neither" not in why and len(why) > len(name) + 30, name
        if "input" in name or "attn_in" in name or name.endswith(("hook_in", "hook_out")):
            assert "not offered" in why, name  # the bridge's names and TransformerLens's split inputs
    assert mine["blocks.1.attn.hook_z"].layer() == 1


def test_add_hook_stays_until_reset_hooks_as_in_transformer_lens(pair):
    ours, bridge, ids = pair

    def zero_head_3(z, hook):
        z[:, :, 3] = 0.0

    plain = ours(ids).logits
    for model in (ours, bridge):
        model.add_hook("blocks.0.attn.hook_z", zero_head_3)
        model.add_hook(lambda n: n.endswith("hook_resid_post"), lambda a, hook: a * 0.5, is_permanent=True)
    torch.testing.assert_close(ours(ids).logits, bridge(ids), atol=ATOL, rtol=0)
    assert (ours(ids).logits - plain).abs().max() > 1e-3
    both = ours(ids).logits
    # run_with_hooks adds its own hooks on top and removes only those
    extra = [("blocks.1.hook_mlp_out", lambda a, hook: a * 0.0)]
    torch.testing.assert_close(
        ours.run_with_hooks(ids, fwd_hooks=extra), bridge.run_with_hooks(ids, fwd_hooks=extra), atol=ATOL, rtol=0
    )
    torch.testing.assert_close(ours(ids).logits, both, atol=0, rtol=0)
    for model in (ours, bridge):
        model.reset_hooks()  # the permanent one stays
    torch.testing.assert_close(ours(ids).logits, bridge(ids), atol=ATOL, rtol=0)
    for model in (ours, bridge):
        model.reset_hooks(including_permanent=True)
    torch.testing.assert_close(ours(ids).logits, plain, atol=0, rtol=0)
    assert not any(m._forward_hooks for m in ours.modules())
    ours.hook_dict["blocks.1.attn.hook_z"].add_hook(zero_head_3)  # TransformerLens's HookPoint.add_hook
    assert (ours(ids).logits - plain).abs().max() > 1e-3
    ours.hook_dict["blocks.1.attn.hook_z"].remove_hooks()
    torch.testing.assert_close(ours(ids).logits, plain, atol=0, rtol=0)


def test_add_hook_refuses_what_it_cannot_do_by_name(pair):
    ours, _, _ = pair
    with pytest.raises(ValueError, match="add_hook: blocks.0.ln1.hook_normalized is computed from the cache only"):
        ours.add_hook("blocks.0.ln1.hook_normalized", lambda a, h: a)
    with pytest.raises(ValueError, match="backward hooks are not offered"):
        ours.add_hook("blocks.0.attn.hook_z", lambda a, h: a, dir="bwd")
    with pytest.raises(ValueError, match="not offered"):
        ours.add_hook("blocks.0.attn.hook_q_input", lambda a, h: a)
    assert not any(m._forward_hooks for m in ours.modules())


def test_mod_dict_names_modules_the_transformer_lens_way_and_ours(pair):
    ours, bridge, _ = pair
    mods = ours.mod_dict
    assert mods["blocks.0.attn"] is ours.stack.blocks[0].attn is mods["stack.blocks.0.attn"]
    assert mods["blocks.1.mlp"] is ours.stack.blocks[1].ffn
    assert mods["blocks.0.ln1"] is ours.stack.blocks[0].attn_add_norm.norm
    assert mods["ln_final"] is ours.stack.final_norm and mods["unembed"] is ours.lm_head
    assert mods["embed"] is ours.embeddings.embed_tokens
    tl_modules = {"embed", "pos_embed", "ln_final", "unembed", "blocks", "blocks.0"}  # the bridge's names too
    assert tl_modules <= set(bridge.mod_dict) and tl_modules <= set(mods)
    assert {"blocks.0.attn", "blocks.0.mlp", "blocks.0.ln2"} <= set(mods)  # HookedTransformer's inside a block
    assert mods["blocks.0.attn.hook_z"].name == "blocks.0.attn.hook_z"


@pytest.mark.parametrize("return_type", ["logits", "loss", "both", None])
def test_return_type_and_text_input_as_in_transformer_lens(pair, return_type):
    ours, bridge, ids = pair
    scores: dict[int, torch.Tensor] = {}

    def induction_like(pattern, hook):  # the pattern per layer, found by hook.layer() as such code does
        scores[hook.layer()] = pattern.diagonal(dim1=-2, dim2=-1, offset=-1).mean((0, 2))

    hooks = [(lambda name: name.endswith("pattern"), induction_like)]
    for call in ("run_with_hooks", "run_with_cache"):
        kw = {"fwd_hooks": hooks} if call == "run_with_hooks" else {}
        got = getattr(ours, call)(ids, return_type=return_type, **kw)
        want = getattr(bridge, call)(ids, return_type=return_type, **kw)
        if call == "run_with_cache":
            got, want = got[0], want[0]
        if return_type is None:
            assert got is None and want is None
            continue
        for mine, theirs in zip(got if return_type == "both" else [got], want if return_type == "both" else [want]):
            torch.testing.assert_close(mine, theirs, atol=ATOL, rtol=1e-5)
    assert sorted(scores) == [0, 1]
    text = "the cat sat on mat"
    torch.testing.assert_close(ours.run_with_hooks(text), bridge.run_with_hooks(text), atol=ATOL, rtol=0)
    with pytest.raises(ValueError, match="return_type must be"):
        ours.run_with_hooks(ids, return_type="predictions")


CFG_NAMES = ["n_layers", "d_model", "n_heads", "d_head", "d_mlp", "d_vocab", "d_vocab_out", "n_ctx"]
CFG_NAMES += ["n_key_value_heads", "normalization_type", "positional_embedding_type", "gated_mlp", "eps", "dtype"]


def test_cfg_gives_transformer_lens_config_names_their_values(pair):
    import transformers
    from transformer_lens.model_bridge.sources._bridge_builder import build_bridge_from_module

    from anatomy.interop.hf import from_hf

    ours, bridge, _ = pair
    config = transformers.LlamaConfig(
        vocab_size=64,
        hidden_size=16,
        intermediate_size=40,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=32,
        rms_norm_eps=1e-6,
    )
    llama = transformers.LlamaForCausalLM(config).eval()
    ours_llama = from_hf(llama)  # before the bridge wraps the module
    llama_bridge = build_bridge_from_module(llama, "LlamaForCausalLM", hf_config=config)
    for mine, theirs in ((ours, bridge), (ours_llama, llama_bridge)):
        for name in CFG_NAMES:
            assert getattr(mine.cfg, name) == getattr(theirs.cfg, name), name
        assert str(mine.cfg.device) == str(theirs.cfg.device)
    t5 = anatomy.build_model(anatomy.ModelConfig.from_preset("t5", n_layers=1, d_model=16, n_heads=2, vocab_size=32))
    with pytest.raises(ValueError, match="no TransformerLens cfg"):
        _ = t5.cfg
