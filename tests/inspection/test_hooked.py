"""anatomy.inspection.hooked: run_with_cache / run_with_hooks as TransformerLens users call them."""

from __future__ import annotations

import pytest
import torch

import anatomy
from anatomy.inspection import LensHook, ablate_head, get_act_name, patching


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    cfg = anatomy.ModelConfig.from_preset(
        "gpt2", vocab_size=40, d_model=16, n_heads=4, n_layers=2, max_seq_len=16, dropout=0.0
    )
    return anatomy.build_model(cfg).eval()


@pytest.fixture(scope="module")
def ids():
    return torch.randint(0, 40, (2, 6), generator=torch.Generator().manual_seed(1))


def test_run_with_cache_returns_the_logits_and_both_names(model, ids):
    logits, cache = model.run_with_cache(ids)
    torch.testing.assert_close(logits, model(ids).logits, atol=1e-5, rtol=0)  # math kernel when hooked
    assert cache["blocks.0.attn.hook_pattern"].shape == (2, 4, 6, 6)
    assert cache["blocks.0.attn.hook_z"].shape == (2, 6, 4, 4)  # (B, T, H, Dh)
    assert cache["stack.blocks.0.attn.hook_z"].shape == (2, 4, 6, 4)  # ours: (B, H, T, Dh)
    torch.testing.assert_close(cache["blocks.0.attn.hook_z"], cache["stack.blocks.0.attn.hook_z"].transpose(1, 2))
    assert cache["blocks.0.attn.hook_result"].shape == (2, 6, 4, 16)  # (B, T, H, D)
    attn_out = cache["blocks.0.attn.hook_result"].sum(2) + model.b_O[0]  # heads add up to the layer's output
    torch.testing.assert_close(attn_out, cache["blocks.0.hook_attn_out"], atol=1e-6, rtol=0)
    torch.testing.assert_close(
        cache["blocks.0.ln1.hook_scale"] * cache["stack.blocks.0.attn_add_norm.norm.hook_scale"],
        torch.ones(2, 6, 1),
        atol=1e-6,
        rtol=0,
    )  # TL's divisor is our factor's inverse
    assert "blocks.0.attn.hook_pattern" in cache.keys() and "stack.blocks.0.hook_resid_post" in cache.keys()
    with pytest.raises(KeyError, match="not in the cache"):
        cache["blocks.0.attn.hook_nothing"]


def test_names_filter_keeps_only_what_it_accepts(model, ids):
    _, cache = model.run_with_cache(ids, names_filter=lambda n: n.endswith("hook_pattern"))
    assert cache.keys() == ["blocks.0.attn.hook_pattern", "blocks.1.attn.hook_pattern"]
    _, cache = model.run_with_cache(ids, names_filter=["blocks.1.hook_resid_post"], return_cache_object=False)
    assert list(cache) == ["blocks.1.hook_resid_post"]


def test_a_hook_gets_the_activation_and_a_hook_object_and_its_return_replaces_it(model, ids):
    seen: list[tuple[str, tuple, int]] = []

    def look(act, hook):
        assert isinstance(hook, LensHook)
        seen.append((hook.name, tuple(act.shape), hook.layer()))

    model.run_with_hooks(ids, fwd_hooks=[(get_act_name("z", 1), look), (lambda n: n.endswith("ln2.hook_scale"), look)])
    assert seen == [
        ("blocks.0.ln2.hook_scale", (2, 6, 1), 0),
        ("blocks.1.attn.hook_z", (2, 6, 4, 4), 1),
        ("blocks.1.ln2.hook_scale", (2, 6, 1), 1),
    ]
    out = model.run_with_hooks(ids, fwd_hooks=[("blocks.1.hook_resid_post", lambda act, hook: act * 0)])
    torch.testing.assert_close(out, model.lm_head(model.stack.final_norm(torch.zeros(2, 6, 16))))
    assert not any(m._forward_hooks for m in model.modules())  # nothing stays attached


def test_zeroing_a_head_through_the_transformer_lens_name_zeroes_a_head_not_a_token(model, ids):
    def zero_head_2(z, hook):
        z[:, :, 2] = 0.0  # TransformerLens's (B, T, H, Dh): head 2

    got = model.run_with_hooks(ids, fwd_hooks=[("blocks.0.attn.hook_z", zero_head_2)])
    with patching(model, {"stack.blocks.0.attn.hook_z": ablate_head(2)}):
        head = model(ids).logits
    with patching(model, {"stack.blocks.0.attn.hook_z": lambda x, name: x.index_fill(2, torch.tensor([2]), 0.0)}):
        token = model(ids).logits  # token 2 in our (B, H, T, Dh): what a silent layout change would do
    torch.testing.assert_close(got, head, atol=0, rtol=0)
    assert (got - token).abs().max() > 1e-3

    # the same through the per-head result: zero head 2's contribution
    def zero_result(r, hook):
        r[:, :, 2] = 0.0

    torch.testing.assert_close(
        model.run_with_hooks(ids, fwd_hooks=[("blocks.0.attn.hook_result", zero_result)]), head, atol=1e-5, rtol=0
    )


def test_pattern_and_scores_edits_reach_the_model(model, ids):
    _, cache = model.run_with_cache(ids)
    scores = cache["blocks.0.attn.hook_attn_scores"]
    assert torch.isinf(scores[0, 0, 0, 1:]).all() and torch.isfinite(scores[0, 0, -1]).all()  # hidden keys: -inf

    def uniform(act, hook):
        return torch.zeros_like(act)  # every visible key the same score; the kernel hides the future again

    model.run_with_hooks(
        ids,
        fwd_hooks=[
            ("blocks.0.attn.hook_attn_scores", uniform),
            ("blocks.0.attn.hook_pattern", lambda p, hook: seen.append(p.clone())),
        ],
    )
    assert seen
    torch.testing.assert_close(seen[0][0, 0, 2], torch.tensor([1 / 3, 1 / 3, 1 / 3, 0, 0, 0]))


seen: list[torch.Tensor] = []


def test_a_filter_sees_each_point_once_under_one_name(model, ids):
    seen: list[tuple[str, tuple]] = []
    model.run_with_hooks(ids, fwd_hooks=[(lambda n: n.endswith("hook_z"), lambda a, h: seen.append((h.name, a.shape)))])
    assert seen == [("blocks.0.attn.hook_z", (2, 6, 4, 4)), ("blocks.1.attn.hook_z", (2, 6, 4, 4))]  # TL's names
    seen.clear()  # a filter that accepts none of TransformerLens's names gets ours (our layout)
    model.run_with_hooks(ids, fwd_hooks=[(lambda n: n.endswith("attn.hook_merged"), lambda a, h: seen.append(h.name))])
    assert seen == ["stack.blocks.0.attn.hook_merged", "stack.blocks.1.attn.hook_merged"]
    _, cache = model.run_with_cache(ids, names_filter=lambda n: n.endswith("hook_z"))
    assert cache.keys() == ["blocks.0.attn.hook_z", "blocks.1.attn.hook_z"]
    with pytest.raises(KeyError, match="left out by names_filter"):
        cache["stack.blocks.0.attn.hook_z"]


def test_what_cannot_be_matched_is_refused_with_the_reason(model, ids):
    with pytest.raises(ValueError, match="computed from the cache only"):
        model.run_with_hooks(ids, fwd_hooks=[("blocks.0.ln1.hook_normalized", lambda a, h: a)])
    with pytest.raises(ValueError, match="the filter selects blocks.0.ln1.hook_normalized"):
        model.run_with_hooks(ids, fwd_hooks=[(lambda n: "normalized" in n, lambda a, h: a)])
    with pytest.raises(ValueError, match="no hook of this model"):
        model.run_with_hooks(ids, fwd_hooks=[("blocks.0.attn.hook_nothing", lambda a, h: a)])
    with pytest.raises(ValueError, match="not HookedTransformer names"):
        model.run_with_hooks(ids, fwd_hooks=[("blocks.0.ln1.hook_out", lambda a, h: a)])
    with pytest.raises(ValueError, match=r"wrap the pair in \[ \]"):
        model.run_with_hooks(ids, fwd_hooks=("blocks.0.attn.hook_z", lambda a, h: a))
    with pytest.raises(ValueError, match="bwd_hooks are not offered"):
        model.run_with_hooks(ids, bwd_hooks=[("blocks.0.attn.hook_z", lambda a, h: a)])
    with pytest.raises(ValueError, match=r"returned \(1,\)"):
        model.run_with_hooks(ids, fwd_hooks=[("blocks.0.hook_resid_pre", lambda a, h: torch.zeros(1))])
    assert not any(m._forward_hooks for m in model.modules())
    llama = anatomy.build_model(
        anatomy.ModelConfig.from_preset("llama", vocab_size=40, d_model=16, n_heads=4, n_layers=1, max_seq_len=16)
    )
    _, cache = llama.run_with_cache(ids)
    with pytest.raises(KeyError, match="cos/sin tables are not offered"):
        cache["blocks.0.attn.hook_cos"]


def test_our_own_names_work_in_fwd_hooks_with_our_layout(model, ids):
    shapes = []
    model.run_with_hooks(ids, fwd_hooks=[("stack.blocks.0.attn.hook_z", lambda a, h: shapes.append((h.name, a.shape)))])
    assert shapes == [("stack.blocks.0.attn.hook_z", (2, 4, 6, 4))]


def test_model_hooks_keeps_the_hooks_for_every_forward_of_the_block(model, ids):
    calls = []
    with model.hooks(fwd_hooks=[("blocks.0.hook_resid_pre", lambda a, h: calls.append(h.name))]):
        model(ids)
        model(ids[:, :3])
    assert calls == ["blocks.0.hook_resid_pre"] * 2
    model(ids)
    assert len(calls) == 2 and not any(m._forward_hooks for m in model.modules())


def test_padded_keys_are_minus_inf_in_the_scores_by_keyword_or_position(model, ids):
    mask = torch.ones(2, 6, dtype=torch.long)
    mask[1, :2] = 0  # left padding
    for call in ({"attention_mask": mask}, None):
        if call is None:
            _, cache = model.run_with_cache(ids, mask)
        else:
            _, cache = model.run_with_cache(ids, **call)
        scores = cache["blocks.0.attn.hook_attn_scores"]
        assert torch.isinf(scores[1, :, :, :2]).all() and torch.isfinite(scores[1, :, -1, 2:]).all()
        assert torch.isfinite(scores[0, :, -1]).all()
    seen = []
    model.run_with_hooks(
        ids,
        mask,
        fwd_hooks=[("blocks.0.attn.hook_attn_scores", lambda s, h: seen.append(torch.isinf(s[1, 0, -1, :2]).all()))],
    )
    assert seen == [torch.tensor(True)]
