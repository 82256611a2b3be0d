"""The decode step (``anatomy.generation.fast``: the model's forward on a flat view) against the module path (the
KV cache it writes into is tested in tests/components/test_kv_cache.py; the views in test_flat.py)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from anatomy import ModelConfig, build_model
from anatomy.generation import generate
from anatomy.generation.fast import refusal
from anatomy.generation.flat import flat

SMALL = dict(vocab_size=50, d_model=32, n_heads=4, n_layers=2, d_ff=64, max_seq_len=64)

# Every decoder-only design the step accepts: each positional site, both norms, all four placements, gated FFNs,
# fused and separate projections, GQA/MQA, no bias.
ACCEPTED = {
    "gpt2": ("gpt2", {}),
    "llama-gqa": ("llama", dict(n_kv_heads=2)),
    "llama-mqa-interleaved": ("llama", dict(n_kv_heads=1, rope_layout="interleaved")),
    "alibi-post": ("gpt2", dict(positional="alibi", norm_position="post", final_norm=False)),
    "sinusoidal-sandwich-geglu": ("gpt2", dict(positional="sinusoidal", norm_position="sandwich", activation="geglu")),
    "none-deepnorm-rmsnorm": (
        "gpt2",
        dict(positional="none", norm_position="deepnorm", norm="rmsnorm", final_norm=False),
    ),
    "separate-qkv-nobias-sdpa": ("gpt2", dict(fused_qkv=False, bias=False, kernel="sdpa")),
    "scaled-embeddings-untied": ("gpt2", dict(scale_embeddings=True, tie_embeddings=False)),
    "decoupled-heads": ("llama", dict(n_heads=2, n_kv_heads=1, head_dim=24)),  # H·Dh = 48 != d_model = 32
    "qwen3-qk-norm": ("qwen3", dict(n_kv_heads=2, head_dim=16)),  # RMSNorm QK-norm before RoPE
    "gpt2-qk-layernorm": ("gpt2", dict(qk_norm=True)),  # LayerNorm QK-norm, fused projections
    "sliding-window": ("llama", dict(n_kv_heads=2, sliding_window=4)),  # the step reads the last 4 slots only
    "sliding-window-alibi": ("gpt2", dict(positional="alibi", sliding_window=3)),
    "local-global-layers": ("llama", dict(n_kv_heads=2, sliding_window=3, window_pattern="LG")),  # Gemma 2 style
}


def _model(preset: str, **overrides):
    torch.manual_seed(0)
    model = build_model(ModelConfig.from_preset(preset, **{**SMALL, **overrides}))
    with torch.no_grad():
        for p in model.parameters():  # peaked, varied logits instead of a near-uniform random start
            p.add_(0.3 * torch.randn_like(p))
    return model.eval()


def _prompt(b: int = 3, t: int = 7, pad: tuple[int, ...] = (0, 2, 5)):
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(1, 50, (b, t), generator=g)
    mask = torch.ones(b, t, dtype=torch.long)
    for row, n in enumerate(pad[:b]):
        mask[row, :n] = 0
        ids[row, :n] = 0
    return ids, mask


@pytest.mark.parametrize("name", list(ACCEPTED))
def test_step_logits_equal_the_module_path(name):
    preset, overrides = ACCEPTED[name]
    model = _model(preset, **overrides)
    assert refusal(model) is None
    ids, mask = _prompt()
    with torch.inference_mode():
        caches_a, caches_b = model.new_caches(32), model.new_caches(32)
        model(ids, mask, kv_caches=caches_a, use_cache=True)
        model(ids, mask, kv_caches=caches_b, use_cache=True)
        view = flat(model)  # what generate's decode steps call
        token = torch.tensor([3, 17, 41])
        for _ in range(6):
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
            slow = model(token[:, None], mask, kv_caches=caches_a, use_cache=True).logits[:, -1]  # (B, V)
            fast = view(token[:, None], mask, kv_caches=caches_b, use_cache=True).logits[:, -1]
            torch.testing.assert_close(fast, slow, rtol=0, atol=0)  # the same code: the same floats
            assert len(caches_a[0]) == len(caches_b[0])
            torch.testing.assert_close(caches_b[-1].k, caches_a[-1].k, rtol=0, atol=1e-5)
            token = slow.argmax(-1)


@pytest.mark.parametrize("name", ["gpt2", "llama-gqa", "alibi-post"])
def test_greedy_tokens_identical_batched_and_alone(name):
    preset, overrides = ACCEPTED[name]
    model = _model(preset, **overrides)
    ids, mask = _prompt()
    fast = generate(model, ids, mask, max_new_tokens=12)
    slow = generate(model, ids, mask, max_new_tokens=12, fast=False)
    assert torch.equal(fast, slow)
    for row in range(ids.shape[0]):  # a left-padded row equals its prompt alone
        real = mask[row].bool()
        alone = generate(model, ids[row : row + 1, real], max_new_tokens=12)
        assert torch.equal(alone[0, -12:], fast[row, -12:])


@pytest.mark.parametrize("name", ["gpt2", "llama-gqa"])
def test_bfloat16_models_give_the_same_tokens(name):
    preset, overrides = ACCEPTED[name]
    model = _model(preset, **overrides).to(torch.bfloat16)  # norms fall back to their modules (float32 stats)
    ids, mask = _prompt()
    assert torch.equal(
        generate(model, ids, mask, max_new_tokens=10), generate(model, ids, mask, max_new_tokens=10, fast=False)
    )


def test_sampling_and_eos_follow_the_same_draws():
    model = _model("gpt2")
    ids, mask = _prompt()
    kw = dict(max_new_tokens=15, do_sample=True, top_k=10, top_p=0.9, temperature=0.8, eos_token_id=[4, 9])
    a = generate(model, ids, mask, generator=torch.Generator().manual_seed(5), **kw)
    b = generate(model, ids, mask, generator=torch.Generator().manual_seed(5), fast=False, **kw)
    assert torch.equal(a, b)


def test_refusals_name_the_reason_and_generate_falls_back():
    model = _model("gpt2")
    seen = []
    handle = model.stack.blocks[1].attn.hook_out.register_forward_hook(lambda m, i, o: seen.append(o.shape))
    try:
        assert refusal(model) == (
            "a forward hook is attached to stack.blocks.1.attn.hook_out (inspection needs the module path)"
        )
        generate(model, torch.tensor([[1, 2, 3]]), max_new_tokens=4)
    finally:
        handle.remove()
    assert [s[1] for s in seen] == [3, 1, 1, 1]  # prefill, then every decode step ran through the modules
    assert refusal(model) is None
    handle = model.register_forward_pre_hook(lambda m, a: None)
    try:
        assert refusal(model) == "a forward hook is attached to the model (inspection needs the module path)"
    finally:
        handle.remove()
    handle = torch.nn.modules.module.register_module_forward_hook(lambda m, i, o: None)
    try:
        assert refusal(model).startswith("a global module hook is registered")
    finally:
        handle.remove()


class _Foreign(torch.nn.Module):  # a user's own FFN class: a view cannot vouch for its methods
    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x):
        return self.inner(x)


def test_a_class_from_elsewhere_is_declined_by_name_and_decodes_through_the_modules():
    model = _model("gpt2")
    ids, mask = _prompt()
    before = generate(model, ids, mask, max_new_tokens=6)
    model.stack.blocks[0].ffn = _Foreign(model.stack.blocks[0].ffn)
    assert refusal(model) == (f"stack.blocks.0.ffn is a {__name__}._Foreign, a class from outside anatomy and torch.nn")
    assert torch.equal(generate(model, ids, mask, max_new_tokens=6), before)


@pytest.mark.parametrize(
    "overrides",
    [
        dict(kernel="math"),
        dict(kernel="loop"),
        dict(positional="shaw"),
        dict(attn_softcap=20.0),
        dict(parallel_residual=True),
    ],
    ids=["math", "loop", "shaw", "softcap", "parallel"],
)
def test_every_design_decodes_through_the_view_with_the_module_paths_tokens(overrides):
    """What the old flattened step declined (teaching kernels, Shaw's value term, soft-capping, GPT-J's parallel
    residual) is the modules' own code on a view: accepted, and the tokens are the module path's."""
    model = _model("gpt2", **overrides)
    assert refusal(model) is None
    ids, mask = _prompt()
    assert torch.equal(
        generate(model, ids, mask, max_new_tokens=6), generate(model, ids, mask, max_new_tokens=6, fast=False)
    )


def test_encoder_decoder_models_decode_through_the_view_too():
    torch.manual_seed(0)
    model = build_model(ModelConfig.from_preset("t5", **SMALL)).eval()
    assert refusal(model) is None
    ids, mask = _prompt()
    assert torch.equal(
        generate(model, ids, mask, max_new_tokens=6), generate(model, ids, mask, max_new_tokens=6, fast=False)
    )


# ------------------------------------------------------------------------------------------ random designs

DESIGNS = st.fixed_dictionaries(
    {
        "preset": st.sampled_from(["gpt2", "llama", "qwen3"]),
        "positional": st.sampled_from(["learned", "sinusoidal", "rope", "alibi", "none"]),
        "norm": st.sampled_from(["layernorm", "rmsnorm"]),
        "norm_position": st.sampled_from(["pre", "post", "sandwich", "deepnorm"]),
        "activation": st.sampled_from(["gelu", "gelu_tanh", "swiglu", "geglu", "geglu_tanh", "relu"]),
        "n_kv_heads": st.sampled_from([4, 2, 1]),
        "head_dim": st.sampled_from([None, 6, 12]),
        "qk_norm": st.booleans(),
        "sliding_window": st.sampled_from([None, 1, 3, 6]),
        "window_pattern": st.sampled_from([None, "LG", "GL"]),  # with a window only (else left out below)
        "fused_qkv": st.booleans(),
        "bias": st.booleans(),
    }
)


@settings(max_examples=max(30, settings.default.max_examples))
@given(
    design=DESIGNS,
    b=st.integers(1, 3),
    t=st.integers(1, 6),
    pads=st.lists(st.integers(0, 5), min_size=3, max_size=3),
    sample=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_random_designs_decode_the_same_on_both_paths(design, b, t, pads, sample, seed):
    """Any mix of the designs the step accepts: the same tokens as the module path, batched and left-padded."""
    preset = design.pop("preset")
    if design["sliding_window"] is None:
        design["window_pattern"] = None
    if design["fused_qkv"] and preset != "gpt2":
        design["fused_qkv"] = False  # the presets keep their own projection layout; gpt2 covers the fused one
    model = _model(preset, **design, final_norm=design["norm_position"] in ("pre", "sandwich"))
    assert refusal(model) is None
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, 50, (b, t), generator=g)
    mask = torch.ones(b, t, dtype=torch.long)
    for row in range(b):
        mask[row, : min(pads[row], t - 1)] = 0  # left padding, at least one real token per row
    kw = dict(max_new_tokens=5, do_sample=sample, **({"top_k": 8} if sample else {}))  # top_k alone: refused
    fast = generate(model, ids, mask, generator=torch.Generator().manual_seed(seed), **kw)
    slow = generate(model, ids, mask, generator=torch.Generator().manual_seed(seed), fast=False, **kw)
    assert torch.equal(fast, slow), design
