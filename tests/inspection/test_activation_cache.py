"""anatomy.inspection.activation_cache: the cache of ``run_with_cache`` against TransformerLens 4.3's own cache.

The same tiny random GPT-2 and Llama (transformers' config classes, every weight perturbed so norms have real
weights and biases) run in our model (``from_hf``) and in TransformerLens's ``TransformerBridge`` (built around
the HF module offline, ``enable_compatibility_mode(no_processing=True)``: HookedTransformer's names and hook
semantics, weights not folded). Every name TransformerLens caches is either equal in ours (float32, atol 1e-5) or
refused with a reason; the residual-stream methods and the weights agree too. BERT (Post-Norm, our ``Encoder``
from HF's ``BertModel`` inside the ``BertForMaskedLM`` the bridge wraps) is checked name by name.
"""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers", reason="waits for transformers (pip install transformers)")
pytest.importorskip("transformer_lens", reason="waits for transformer-lens (pip install transformer-lens)")

from anatomy.interop.hf import from_hf  # noqa: E402

ATOL = 1e-5
BRIDGE_ALIASES = (".hook_in", ".hook_out", ".hook_hidden_states", "hook_unembed")


def _perturbed(model):
    torch.manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    return model.eval()


def _pair(kind: str):
    from transformer_lens.model_bridge.sources._bridge_builder import build_bridge_from_module

    torch.manual_seed(0)
    if kind == "gpt2":
        cfg = transformers.GPT2Config(
            vocab_size=64,
            n_positions=32,
            n_embd=16,
            n_layer=2,
            n_head=4,
            attn_implementation="eager",
            bos_token_id=0,
            eos_token_id=0,
        )
        hf, arch = transformers.GPT2LMHeadModel(cfg), "GPT2LMHeadModel"
    else:
        cfg = transformers.LlamaConfig(
            vocab_size=64,
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=32,
            attn_implementation="eager",
            bos_token_id=0,
            eos_token_id=1,
            pad_token_id=2,
        )
        hf, arch = transformers.LlamaForCausalLM(cfg), "LlamaForCausalLM"
    hf = _perturbed(hf)
    ours = from_hf(hf).eval()
    bridge = build_bridge_from_module(hf, arch, hf_config=cfg)
    bridge.enable_compatibility_mode(no_processing=True, disable_warnings=True)
    bridge.set_use_attn_result(True)
    ids = torch.randint(3, 64, (2, 7))
    return ours, bridge, ids


@pytest.fixture(scope="module", params=["gpt2", "llama"])
def pair(request):
    ours, bridge, ids = _pair(request.param)
    tl_logits, tl_cache = bridge.run_with_cache(ids)
    logits, cache = ours.run_with_cache(ids)
    return request.param, ours, bridge, ids, (tl_logits, tl_cache), (logits, cache)


def test_every_transformer_lens_name_is_equal_or_refused_with_a_reason(pair):
    kind, _, _, _, (tl_logits, tl_cache), (logits, cache) = pair
    torch.testing.assert_close(logits, tl_logits, atol=ATOL, rtol=0)
    matched, refused = [], {}
    for name in tl_cache.keys():
        try:
            ours = cache[name]
        except KeyError as e:
            refused[name] = str(e)
            continue
        torch.testing.assert_close(ours, tl_cache[name], atol=ATOL, rtol=0, msg=lambda m, n=name: f"{n}: {m}")
        matched.append(name)
    core = [
        "hook_embed",
        "blocks.0.hook_resid_pre",
        "blocks.0.ln1.hook_scale",
        "blocks.0.ln1.hook_normalized",
        "blocks.0.attn.hook_q",
        "blocks.0.attn.hook_k",
        "blocks.0.attn.hook_v",
        "blocks.0.attn.hook_attn_scores",
        "blocks.0.attn.hook_pattern",
        "blocks.0.attn.hook_z",
        "blocks.0.attn.hook_result",
        "blocks.0.hook_attn_out",
        "blocks.0.hook_resid_mid",
        "blocks.0.ln2.hook_scale",
        "blocks.0.ln2.hook_normalized",
        "blocks.0.mlp.hook_pre",
        "blocks.0.mlp.hook_post",
        "blocks.0.hook_mlp_out",
        "blocks.1.hook_resid_post",
        "ln_final.hook_scale",
        "ln_final.hook_normalized",
    ]
    core += (
        ["hook_pos_embed"]
        if kind == "gpt2"
        else ["blocks.0.attn.hook_rot_q", "blocks.0.attn.hook_rot_k", "blocks.0.mlp.hook_pre_linear"]
    )
    assert set(core) <= set(matched)
    for name, why in refused.items():  # only the bridge's own aliases and RoPE's tables, each said
        assert name.endswith(BRIDGE_ALIASES) or name.endswith(("hook_cos", "hook_sin")), name
        assert "not offered" in why, why
    assert cache["blocks.0.attn.hook_z"].shape == (2, 7, 4, 4)  # (B, T, H, Dh) under the TransformerLens name
    prefix = "stack.blocks.0.attn"
    assert cache[f"{prefix}.hook_z"].shape == (2, 4, 7, 4)  # ours keeps (B, H, T, Dh)
    torch.testing.assert_close(cache["pattern", 0], cache[f"{prefix}.hook_weights"], atol=0, rtol=0)
    torch.testing.assert_close(cache["z", -1], cache["blocks.1.attn.hook_z"], atol=0, rtol=0)


@pytest.mark.parametrize(
    "method, kwargs",
    [
        ("accumulated_resid", {}),
        ("accumulated_resid", {"apply_ln": True, "incl_mid": True}),
        ("accumulated_resid", {"layer": 1, "apply_ln": True, "mlp_input": True}),
        ("accumulated_resid", {"pos_slice": -1, "apply_ln": True}),
        ("decompose_resid", {}),
        ("decompose_resid", {"apply_ln": True}),
        ("decompose_resid", {"layer": 1, "mlp_input": True, "apply_ln": True, "mode": "attn"}),
        ("stack_head_results", {}),
        ("stack_head_results", {"apply_ln": True, "incl_remainder": True}),
    ],
)
def test_residual_stream_methods_equal_transformer_lens(pair, method, kwargs):
    _, _, _, _, (_, tl_cache), (_, cache) = pair
    want, want_labels = getattr(tl_cache, method)(return_labels=True, **kwargs)
    got, labels = getattr(cache, method)(return_labels=True, **kwargs)
    assert labels == want_labels
    torch.testing.assert_close(got, want, atol=ATOL, rtol=0)


def test_logit_attrs_equal_transformer_lens_for_ids_per_example_and_per_position(pair):
    _, _, _, ids, (_, tl_cache), (_, cache) = pair
    stack, tl_stack = cache.decompose_resid(), tl_cache.decompose_resid()
    for tokens in (5, ids[:, -1], ids):
        torch.testing.assert_close(
            cache.logit_attrs(stack, tokens=tokens), tl_cache.logit_attrs(tl_stack, tokens), atol=ATOL, rtol=0
        )
    torch.testing.assert_close(
        cache.logit_attrs(stack, ids[:, -1], incorrect_tokens=ids[:, 0]),
        tl_cache.logit_attrs(tl_stack, ids[:, -1], incorrect_tokens=ids[:, 0]),
        atol=ATOL,
        rtol=0,
    )
    # the decomposition sums to the final residual: attributions of all parts = the logit before the norm's shift
    whole = cache.logit_attrs(cache.accumulated_resid()[-1:], tokens=ids)
    torch.testing.assert_close(cache.logit_attrs(stack, tokens=ids).sum(0), whole[0], atol=1e-4, rtol=0)
    with pytest.raises(ValueError, match="give token ids"):
        cache.logit_attrs(stack, tokens=" the")


def test_weights_equal_transformer_lens_in_its_shapes(pair):
    kind, ours, bridge, *_ = pair
    names = ["W_E", "W_Q", "W_K", "W_V", "W_O", "W_U", "b_U", "W_in", "W_out"]
    names += ["W_pos", "b_Q", "b_K", "b_V", "b_O", "b_in", "b_out"] if kind == "gpt2" else ["W_gate"]
    for name in names:
        torch.testing.assert_close(
            getattr(ours, name), getattr(bridge, name), atol=0, rtol=0, msg=lambda m, n=name: f"{n}: {m}"
        )
    assert ours.W_Q.shape == (2, 4, 16, 4) and ours.W_O.shape == (2, 4, 4, 16)
    if kind == "llama":
        assert ours.W_K.shape == (2, 2, 16, 4)  # one per key/value head, as TransformerLens 4
        for name in ("b_Q", "b_O", "b_in"):  # absent biases: refused by both
            with pytest.raises(Exception, match="no such"):
                getattr(bridge, name)
            with pytest.raises(ValueError, match="no such bias"):
                getattr(ours, name)


def test_the_same_head_ablation_through_transformer_lens_names_gives_the_same_logits(pair):
    _, ours, bridge, ids, *_ = pair

    def zero_head(z, hook):
        z[:, :, 2] = 0.0
        return z

    want = bridge.run_with_hooks(ids, fwd_hooks=[("blocks.1.attn.hook_z", zero_head)])
    got = ours.run_with_hooks(ids, fwd_hooks=[("blocks.1.attn.hook_z", zero_head)])
    torch.testing.assert_close(got, want, atol=ATOL, rtol=0)
    plain = ours(ids).logits
    assert (got - plain).abs().max() > 1e-3  # the edit did something


def test_bert_every_transformer_lens_name_is_equal_or_refused_with_a_reason():
    from transformer_lens.model_bridge.sources._bridge_builder import build_bridge_from_module

    torch.manual_seed(0)
    cfg = transformers.BertConfig(
        vocab_size=64,
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=32,
        max_position_embeddings=32,
        attn_implementation="eager",
    )
    hf = _perturbed(transformers.BertForMaskedLM(cfg))
    ours = from_hf(hf.bert).eval()
    bridge = build_bridge_from_module(hf, "BertForMaskedLM", hf_config=cfg)
    bridge.enable_compatibility_mode(no_processing=True, disable_warnings=True)
    ids = torch.randint(3, 64, (2, 7))
    _, tl_cache = bridge.run_with_cache(ids)
    hidden, cache = ours.run_with_cache(ids)
    assert hidden.shape == (2, 7, 16)  # an Encoder returns its last hidden state
    matched, refused = [], {}
    for name in tl_cache.keys():
        try:
            got = cache[name]
        except KeyError as e:
            refused[name] = str(e)
            continue
        torch.testing.assert_close(got, tl_cache[name], atol=ATOL, rtol=0, msg=lambda m, n=name: f"{n}: {m}")
        matched.append(name)
    assert {
        "hook_pos_embed",
        "embed_ln.hook_scale",
        "blocks.0.hook_resid_pre",
        "blocks.0.attn.hook_q",
        "blocks.0.attn.hook_z",
        "blocks.0.attn.hook_pattern",
        "blocks.0.ln1.hook_scale",
        "blocks.0.mlp.hook_pre",
        "blocks.0.hook_mlp_out",
        "blocks.0.ln2.hook_scale",
        "blocks.1.hook_resid_post",
    } <= set(matched)
    # where TransformerLens 4.3's BERT bridge means something else than HookedEncoder did, we say so
    assert "already holds the residual" in refused["blocks.0.hook_attn_out"]
    assert "softmaxed pattern" in refused["blocks.0.attn.hook_attn_scores"]
    assert "whole embedding output" in refused["hook_embed"]
    assert "Post-Norm" in refused["blocks.0.hook_resid_mid"]
    for name, why in refused.items():
        assert len(why) > len(name) + 20, name  # a reason, not a bare KeyError


def test_a_filter_in_fwd_hooks_sees_each_point_once_as_in_transformer_lens(pair):
    _, ours, bridge, ids, *_ = pair
    for model in (bridge, ours):
        calls: list[str] = []

        def zero_head_3(z, hook, calls=calls):
            calls.append(hook.name)
            z[:, :, 3] = 0.0  # TransformerLens's (B, T, H, Dh): head 3, never token 3

        out = model.run_with_hooks(ids, fwd_hooks=[(lambda name: name.endswith("hook_z"), zero_head_3)])
        assert calls == ["blocks.0.attn.hook_z", "blocks.1.attn.hook_z"]
        if model is bridge:
            want = out
    torch.testing.assert_close(out, want, atol=ATOL, rtol=0)

    def half(act, hook):
        return act * 0.5

    halved = [(lambda name: name.endswith("hook_resid_post"), half)]  # scaled once per block, not twice
    torch.testing.assert_close(
        ours.run_with_hooks(ids, fwd_hooks=halved), bridge.run_with_hooks(ids, fwd_hooks=halved), atol=ATOL, rtol=0
    )
