"""patching(): edits at named hook points for one ``with`` block, exact, and nothing left attached afterwards."""

from __future__ import annotations

import pytest
import torch

import anatomy
from anatomy.inspection import ablate_head, capture, patch_from, patching, replace, run_patched, scale, zero


def _model(preset: str = "gpt2", **overrides):
    torch.manual_seed(0)
    sizes = dict(n_layers=2, n_heads=4, d_model=32, d_ff=64, vocab_size=50, max_seq_len=16, dropout=0.0)
    if preset == "llama":
        sizes.update(n_kv_heads=2, d_ff=48)
        sizes.pop("dropout")
    return anatomy.build_model(anatomy.ModelConfig.from_preset(preset, **{**sizes, **overrides})).eval()


def _hooks(model) -> int:
    return sum(
        len(m._forward_hooks)
        + len(m._forward_pre_hooks)
        + len(m._forward_hooks_with_kwargs)
        + len(m._forward_pre_hooks_with_kwargs)
        for m in model.modules()
    )


def _ids(seed: int = 1, t: int = 10):
    return torch.randint(0, 50, (2, t), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("preset", ["gpt2", "llama"])
@pytest.mark.parametrize("head", [0, 3])
def test_ablating_a_head_equals_zeroing_its_slice_of_hook_z_by_hand(preset, head):
    model, ids = _model(preset), _ids()
    with torch.no_grad():
        clean = model(ids).logits
        with patching(model, {"stack.blocks.1.attn.hook_z": ablate_head(head)}) as fired:
            ablated = model(ids).logits
        assert fired == {"stack.blocks.1.attn.hook_z": 1}

        def by_hand(_module, _args, z):  # (B, H, T, Dh)
            z = z.clone()
            z[:, head] = 0.0
            return z

        handle = model.stack.blocks[1].attn.hook_z.register_forward_hook(by_hand)
        try:
            manual = model(ids).logits
        finally:
            handle.remove()
    assert torch.equal(ablated, manual)
    assert not torch.allclose(ablated, clean, atol=1e-4)  # the head did matter
    assert _hooks(model) == 0


def test_head_ablation_removes_exactly_that_heads_share_of_the_output_projection():
    model, ids = _model(), _ids()
    attn = model.stack.blocks[0].attn
    names = ["stack.blocks.0.attn.hook_z", "stack.blocks.0.attn.hook_out"]
    with torch.no_grad():
        with capture(model, names) as clean:
            model(ids)
        with patching(model, {names[0]: ablate_head(2)}), capture(model, names[1]) as edited:
            model(ids)
    dh = attn.head_dim
    share = clean[names[0]][:, 2] @ attn.o_proj.weight[:, 2 * dh : 3 * dh].T  # (B, T, D): head 2 through W^O
    torch.testing.assert_close(clean[names[1]] - edited[names[1]], share, atol=1e-6, rtol=0)


def test_ablating_at_hook_weights_silences_the_head_too():
    model, ids = _model(), _ids()
    with torch.no_grad():
        at_z = run_patched(model, {"stack.blocks.0.attn.hook_z": ablate_head([1, 2])}, ids).logits
        at_w = run_patched(model, {"stack.blocks.0.attn.hook_weights": ablate_head([1, 2])}, ids).logits
    torch.testing.assert_close(at_w, at_z, atol=1e-5, rtol=0)  # z = weights @ v: zero weights, zero z
    assert _hooks(model) == 0


def test_nothing_stays_attached_also_when_the_forward_raises():
    model = _model()

    def boom(x, name):
        raise RuntimeError(f"boom at {name}")

    with pytest.raises(RuntimeError, match="boom at stack.blocks.1.ffn.hook_hidden"):
        with patching(model, {"stack.blocks.*.attn.hook_z": ablate_head(0), "stack.blocks.1.ffn.hook_hidden": boom}):
            assert _hooks(model) == 3
            model(_ids())
    assert _hooks(model) == 0
    with pytest.raises(ValueError, match="ablate_head: stack.blocks.0.hook_resid_post has shape"):
        with patching(model, {"stack.blocks.0.hook_resid_post": ablate_head(0)}):
            model(_ids())
    assert _hooks(model) == 0
    with pytest.raises(ValueError, match="match no hook point"):  # refused before anything is attached
        with patching(model, {"stack.blocks.0.attn.hook_z": zero(), "blocks.9.hook_nothing": zero()}):
            pass
    assert _hooks(model) == 0
    with torch.no_grad():  # and the model runs as before
        torch.testing.assert_close(model(_ids()).logits, _model()(_ids()).logits, atol=0, rtol=0)


def test_patching_a_cached_run_reproduces_it_exactly():
    model, a, b = _model(), _ids(1), _ids(2)
    last = "stack.blocks.1.hook_resid_post"
    with torch.no_grad():
        with capture(model, ["embeddings.hook_tokens", last]) as run_a:
            logits_a = model(a).logits
        logits_b = model(b).logits
        # the last residual fixes the logits: patched fully, run b gives run a's logits bit for bit
        assert torch.equal(run_patched(model, {last: patch_from(run_a)}, b).logits, logits_a)
        # the token embedding is all that differs between two runs of the same length: patch it, get run a
        assert torch.equal(run_patched(model, {"embeddings.hook_tokens": patch_from(run_a)}, b).logits, logits_a)
        # one position only: the model is causal, so earlier positions keep run b's logits
        one = run_patched(model, {"embeddings.hook_tokens": patch_from(run_a, index=(slice(None), 6))}, b).logits
    assert torch.equal(one[:, :6], logits_b[:, :6])
    assert not torch.allclose(one[:, 6:], logits_b[:, 6:], atol=1e-4)
    with pytest.raises(ValueError, match="patch between runs of the same shape"):
        run_patched(model, {last: patch_from(run_a)}, _ids(3, t=7))
    with pytest.raises(ValueError, match="the cache holds no 'stack.blocks.0.hook_resid_post'"):
        run_patched(model, {"stack.blocks.0.hook_resid_post": patch_from(run_a)}, b)
    assert _hooks(model) == 0


def test_zero_scale_replace_and_chained_edits():
    model, ids = _model(), _ids()
    name = "stack.blocks.0.hook_resid_mid"
    with torch.no_grad():
        with capture(model, name) as seen:
            model(ids)
        x = seen[name]
        with patching(model, {name: [scale(2.0), zero(index=(slice(None), 0))]}), capture(model, name) as edited:
            model(ids)
        want = 2.0 * x
        want[:, 0] = 0.0
        assert torch.equal(edited[name], want)
        value = torch.arange(32.0)
        with patching(model, {name: replace(value, index=(0, 3))}), capture(model, name) as edited:
            model(ids)
        assert torch.equal(edited[name][0, 3], value) and torch.equal(edited[name][1], x[1])
        with patching(model, {name: lambda t, _: None}), capture(model, name) as kept:  # None keeps it
            model(ids)
        assert torch.equal(kept[name], x)
    with pytest.raises(ValueError, match="does not broadcast"):
        run_patched(model, {name: replace(torch.ones(5))}, ids)
    with pytest.raises(ValueError, match=r"returned \(2, 10\); an edit must return a tensor of shape \(2, 10, 32\)"):
        run_patched(model, {name: lambda t, _: t.sum(-1)}, ids)
    with pytest.raises(ValueError, match="head 7 does not exist"):
        run_patched(model, {"stack.blocks.0.attn.hook_z": ablate_head(7)}, ids)
    with pytest.raises(ValueError, match="non-empty mapping"):
        with patching(model, {}):
            pass
    assert _hooks(model) == 0


def test_edits_apply_to_every_forward_in_the_block_including_generation():
    from anatomy.generation import generate

    model, prompt = _model(), _ids()[:1, :4]
    with torch.no_grad():
        plain = generate(model, prompt, max_new_tokens=6)
        with patching(model, {"stack.blocks.*.attn.hook_z": ablate_head([0, 1, 2, 3])}) as fired:
            silenced = generate(model, prompt, max_new_tokens=6)
    assert fired["stack.blocks.0.attn.hook_z"] >= 6  # the prompt, then one call per decoding step
    assert silenced.shape == plain.shape and _hooks(model) == 0


# ------------------------------------------------------------------------------------- the new hook points


def test_embedding_hook_points_split_the_input_of_block_zero():
    model, ids = _model(), _ids()
    names = ["embeddings.hook_tokens", "embeddings.hook_pos", "stack.blocks.0.hook_resid_pre"]
    with torch.no_grad(), capture(model, names) as cache:
        logits = model(ids).logits
    tokens, pos, resid = (cache[n] for n in names)
    assert tokens.shape == pos.shape == resid.shape == (2, 10, 32)
    assert torch.equal(tokens, model.embeddings.embed_tokens.weight[ids])
    assert torch.equal(pos[0], model.embeddings.positional.weight[:10])
    assert torch.equal(tokens + pos, resid)
    with torch.no_grad():
        assert torch.equal(model(ids).logits, logits)  # hooking hook_pos changes nothing


@pytest.mark.parametrize("preset", ["gpt2", "llama"])
def test_norm_and_ffn_hook_points(preset):
    model, ids = _model(preset), _ids()
    block = model.stack.blocks[0]
    norm = block.attn_add_norm.norm
    names = [
        "stack.blocks.0.hook_resid_pre",
        "stack.blocks.0.attn_add_norm.norm.hook_scale",
        "stack.blocks.0.hook_attn_in",
        "stack.blocks.0.ffn.hook_hidden",
        "stack.blocks.0.hook_ffn_in",
    ]
    with torch.no_grad():
        plain = model(ids).logits
        with capture(model, names) as cache:
            hooked = model(ids).logits
    x, s, attn_in, hidden, ffn_in = (cache[n] for n in names)
    assert s.shape == (2, 10, 1) and hidden.shape == (2, 10, block.ffn.d_ff)
    centred = x - x.mean(-1, keepdim=True) if preset == "gpt2" else x
    torch.testing.assert_close(s, centred.pow(2).mean(-1, keepdim=True).add(norm.eps).rsqrt(), atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(attn_in, norm(x), atol=1e-6, rtol=0)  # Pre-Norm: attention sees the norm's output
    ffn = block.ffn
    want = ffn.act(ffn.gate_proj(ffn_in)) * ffn.up_proj(ffn_in) if ffn.gated else ffn.act(ffn.up_proj(ffn_in))
    torch.testing.assert_close(hidden, want, atol=1e-6, rtol=0)  # the FFN's hidden layer, (B, T, F)
    if preset == "gpt2":
        torch.testing.assert_close(hooked, plain, atol=1e-5, rtol=0)  # the step-by-step LayerNorm: same values
    else:
        assert torch.equal(hooked, plain)
    with torch.no_grad():  # the norm's scale can be edited: doubling it doubles what attention sees (RMSNorm)
        scale_name = "stack.blocks.0.attn_add_norm.norm.hook_scale"
        with patching(model, {scale_name: scale(2.0)}), capture(model, "stack.blocks.0.hook_attn_in") as edited:
            model(ids)
    torch.testing.assert_close(
        edited["stack.blocks.0.hook_attn_in"] - (0 if preset == "llama" else norm.bias),
        2 * (attn_in - (0 if preset == "llama" else norm.bias)),
        atol=1e-5,
        rtol=1e-5,
    )
