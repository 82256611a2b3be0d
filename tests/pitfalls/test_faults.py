"""Each fault of the bug zoo shows its effect, leaves other instances untouched, and undoes itself exactly."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from anatomy import ModelConfig, build_model, pitfalls
from anatomy.components import MultiHeadAttention, build_context, kernels, wrapping
from anatomy.components.inputs import attention_inputs
from anatomy.pitfalls import faults

V = 30


def make(arch="encoder", **kw):
    torch.manual_seed(0)
    cfg = ModelConfig(
        architecture=arch,
        vocab_size=V,
        d_model=16,
        n_heads=4,
        n_layers=2,
        max_seq_len=32,
        positional=kw.pop("positional", "sinusoidal"),
        **kw,
    )
    model = build_model(cfg).double().eval()
    with torch.no_grad():  # lively weights, so every fault has something to change
        for p in model.parameters():
            p.normal_(0, 0.5)
    return model


def hidden(model, ids, mask=None):
    out = model(ids, mask)
    return (
        out.last_hidden_state if hasattr(out, "last_hidden_state") and out.last_hidden_state is not None else out.logits
    )


IDS = torch.tensor([[3, 5, 7, 9, 11, 13], [4, 6, 8, 10, 0, 0]])
MASK = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]])


def check_isolation(name, model, run, **params):
    """While the fault is active on `model`, a copy with the same weights is still correct; afterwards `model`
    is correct again. Returns the faulty output."""
    twin = copy.deepcopy(model)
    ref = run(model)
    with pitfalls.inject(model, name, **params):
        bad = run(model)
        assert torch.equal(run(twin), ref), "another instance changed while the fault was active"
    assert torch.equal(run(model), ref), "the fault was not undone exactly"
    return ref, bad


def test_registry_documents_every_fault():
    assert len(pitfalls.FAULTS) == 20
    for f in pitfalls.FAULTS.values():
        assert f.summary_en and f.summary_zh and f.hides_in
        assert f.post_zh is None or (f.post_zh and f.section.startswith("§"))  # the post may say nothing of it
        assert f.severity in ("error", "warning")
    with pytest.raises(ValueError, match="unknown fault 'nope'; valid names: no_scaling"):
        pitfalls.apply(make(), "nope")
    with pytest.raises(ValueError, match="takes parameters"):
        pitfalls.apply(make(), "no_scaling", factor=2)


def test_an_arithmetic_fault_is_the_math_kernel_with_one_step_changed():
    """Without fully hidden rows, -inf with no guard is the math kernel exactly; a shift of 0 is the correct causal
    mask. They take the place of the module's kernel (here SDPA, which returns no weights)."""
    torch.manual_seed(0)
    attn = MultiHeadAttention(d_model=16, n_heads=4, kernel="sdpa").double()
    math_twin = MultiHeadAttention(d_model=16, n_heads=4, kernel="math").double()
    math_twin.load_state_dict(attn.state_dict())
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    mask = (torch.rand(2, 1, 5, 5) > 0.3) | torch.eye(5, dtype=torch.bool)  # every row sees its own key
    ref, w_ref = math_twin(x, ctx=attention_inputs(math_twin, x, mask=mask, is_causal=True), need_weights=True)
    for name, params in [("inf_fill_no_guard", {}), ("causal_off_by_one", {"causal_offset": 0})]:
        with pitfalls.inject(attn, name, **params):
            a, wa = attn(x, ctx=attention_inputs(attn, x, mask=mask, is_causal=True), need_weights=True)
        assert torch.equal(a, ref) and torch.equal(wa, w_ref), name
    with pitfalls.inject(attn, "causal_off_by_one", causal_offset=1):
        shifted, _ = attn(x, ctx=attention_inputs(attn, x, mask=mask, is_causal=True))
    assert not torch.allclose(shifted, ref)


def test_faults_change_one_step_of_the_instance(monkeypatch):
    """The scale faults call the module's kernel with another scale and nothing else changed; the split and merge
    faults are the straight reshapes; the recorder hands on exactly what it receives."""
    seen = []

    def spy(q, k, v, args):
        seen.append(dict(vars(args)))
        return kernels.math_attention(q, k, v, args)

    monkeypatch.setitem(kernels.KERNELS, "spy", kernels.Kernel("spy", spy, True, True))
    torch.manual_seed(0)
    attn = MultiHeadAttention(d_model=16, n_heads=4, scale=0.3).double()
    attn.kernel = "spy"
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    ref = attn(x, ctx=attention_inputs(attn, x, is_causal=True))[0]
    for name in ("no_scaling", "scale_by_d_model"):
        with pitfalls.inject(attn, name):
            attn(x, ctx=attention_inputs(attn, x, is_causal=True))
    assert [kw["scale"] for kw in seen] == [0.3, 1.0, 0.25]
    rest = [{**kw, "scale": 0, "mask": 0} for kw in seen]
    assert all(torch.equal(kw["mask"], seen[0]["mask"]) for kw in seen) and all(r == rest[0] for r in rest)
    y = torch.randn(2, 5, 32, dtype=torch.float64)  # a projection (B, T, H·Dh), or merged heads
    assert torch.equal(faults.split_without_transpose(attn, y, 4), y.view(2, 4, 5, 8))
    heads = torch.randn(2, 4, 5, 8, dtype=torch.float64)
    assert torch.equal(faults.merge_without_transpose(attn, heads), heads.reshape(2, 5, 32))
    from anatomy.inspection.weights import attention_weights

    with attention_weights(attn, heads=[2, 0]) as maps:
        out = attn(x, ctx=attention_inputs(attn, x, is_causal=True))[0]
    assert torch.equal(out, ref) and torch.equal(seen[-1]["mask"], seen[0]["mask"])
    twin = MultiHeadAttention(d_model=16, n_heads=4, kernel="math", scale=0.3).double()
    twin.load_state_dict(attn.state_dict())
    _, w_all = twin(x, ctx=attention_inputs(twin, x, is_causal=True), need_weights=True)
    assert torch.equal(maps[0].weights, w_all[:, [2, 0]])


def test_faults_wrap_the_instance_and_compose_by_step():
    attn = MultiHeadAttention(d_model=16, n_heads=4)
    with pitfalls.inject(attn, "causal_off_by_one", causal_offset=2):
        assert list(wrapping.wrappers(attn, "attend")) == ["replace"] and attn.kernel == "auto"
        assert attn.kernel_args == {} and type(attn) is not MultiHeadAttention and isinstance(attn, MultiHeadAttention)
    with (
        pitfalls.inject(attn, "merge_wrong_transpose"),
        pitfalls.inject(attn, "no_scaling"),
        pitfalls.inject(attn, "split_without_transpose"),
        pitfalls.inject(attn, "mask_after_softmax"),
    ):
        assert set(wrapping.wrappers(attn, "attend")) == {"replace", "change"}
        assert (
            list(wrapping.wrappers(attn, "split_heads")) == list(wrapping.wrappers(attn, "merge_heads")) == ["replace"]
        )
    torch.manual_seed(0)
    x = torch.randn(2, 6, 16)
    by_d_model = MultiHeadAttention(d_model=16, n_heads=4, scale=1 / math.sqrt(16))
    by_d_model.load_state_dict(attn.state_dict())
    with pitfalls.inject(attn, "no_scaling"), pitfalls.inject(attn, "scale_by_d_model"):
        assert torch.equal(attn(x)[0], by_d_model(x)[0])  # the same step: the second takes its place
        assert attn.scale == 0.5  # the module's own scale is untouched
    for method in ("attend", "split_heads", "merge_heads"):
        assert wrapping.wrappers(attn, method) == {}
    assert type(attn) is MultiHeadAttention and not [k for k in vars(attn) if k.startswith(("_attend", "_split"))]
    assert (attn.kernel, attn.kernel_args) == ("auto", {})


def test_composed_faults_equal_both_changes_at_once():
    """no_scaling over the arithmetic fault: the fault's math runs with scale 1, in either order of injection."""
    torch.manual_seed(0)
    attn = MultiHeadAttention(d_model=16, n_heads=4).double()
    x = torch.randn(2, 6, 16, dtype=torch.float64)
    unscaled = MultiHeadAttention(d_model=16, n_heads=4, scale=1.0).double()
    unscaled.load_state_dict(attn.state_dict())
    with pitfalls.inject(unscaled, "causal_off_by_one"):
        want = unscaled(x, ctx=attention_inputs(unscaled, x, is_causal=True))[0]
    for first, second in [("no_scaling", "causal_off_by_one"), ("causal_off_by_one", "no_scaling")]:
        with pitfalls.inject(attn, first), pitfalls.inject(attn, second):
            assert torch.equal(attn(x, ctx=attention_inputs(attn, x, is_causal=True))[0], want), (first, second)


@pytest.mark.parametrize("name, scale", [("no_scaling", 1.0), ("scale_by_d_model", 1 / math.sqrt(16))])
def test_scaling_faults_equal_attention_with_that_scale(name, scale):
    torch.manual_seed(0)
    attn = MultiHeadAttention(d_model=16, n_heads=4).double()
    x = torch.randn(2, 6, 16, dtype=torch.float64)
    ref, bad = check_isolation(name, attn, lambda m: m(x)[0])
    wrong = MultiHeadAttention(d_model=16, n_heads=4, scale=scale).double()
    wrong.load_state_dict(attn.state_dict())
    assert torch.allclose(bad, wrong(x)[0], atol=1e-12) and not torch.allclose(bad, ref)


def _leaks_future(model, name, **params):
    ids = IDS[:1]
    changed = ids.clone()
    changed[0, 4] = 1
    with pitfalls.inject(model, name, **params):
        a, b = hidden(model, ids), hidden(model, changed)
    return (a[0, :4] - b[0, :4]).abs().max().item()


@pytest.mark.parametrize(
    "name, params",
    [("split_without_transpose", {}), ("merge_wrong_transpose", {}), ("causal_off_by_one", {"causal_offset": 1})],
)
def test_faults_that_leak_the_future_into_a_causal_lm(name, params):
    model = make("decoder_lm")
    check_isolation(name, model, lambda m: hidden(m, IDS))
    assert _leaks_future(copy.deepcopy(model), "no_scaling") == 0.0  # a fault that keeps causality: no leak
    assert _leaks_future(model, name, **params) > 1e-6


def test_mask_after_softmax_leaves_rows_that_do_not_sum_to_one():
    torch.manual_seed(0)
    attn = MultiHeadAttention(d_model=16, n_heads=4, kernel="math").double()
    x = torch.randn(2, 6, 16, dtype=torch.float64)
    mask = MASK.bool()[:, None, None, :]
    _, w_ok = attn(x, ctx=attention_inputs(attn, x, mask=mask), need_weights=True)
    check_isolation("mask_after_softmax", attn, lambda m: m(x, ctx=attention_inputs(m, x, mask=mask))[0])
    with pitfalls.inject(attn, "mask_after_softmax"):
        _, w = attn(x, ctx=attention_inputs(attn, x, mask=mask), need_weights=True)
    assert torch.allclose(w_ok.sum(-1), torch.ones(2, 4, 6, dtype=torch.float64))
    assert w[1].sum(-1).max() < 1 - 1e-3 and torch.allclose(w[0].sum(-1), torch.ones(4, 6, dtype=torch.float64))


def test_finite_fill_makes_empty_rows_uniform_and_overflows_float16():
    torch.manual_seed(0)
    attn = MultiHeadAttention(d_model=16, n_heads=4).double()
    x = torch.randn(2, 6, 16, dtype=torch.float64)
    mask = torch.ones(2, 1, 6, 6, dtype=torch.bool)
    mask[1] = False  # the second sequence sees nothing
    ok = attn(x, ctx=attention_inputs(attn, x, mask=mask))[0]
    assert torch.allclose(ok[1], attn.o_proj.bias.expand(6, 16))  # zero attention output, only the out bias
    check_isolation("finite_mask_fill", attn, lambda m: m(x, ctx=attention_inputs(m, x, mask=mask))[0], fill=-1e4)
    for fill in (-1e9, -1e4):
        with pitfalls.inject(attn, "finite_mask_fill", fill=fill):
            bad = attn(x, ctx=attention_inputs(attn, x, mask=mask))[0]
        assert torch.isfinite(bad).all() and (bad[1] - ok[1]).abs().max() > 1e-3  # uniform over hidden keys
    half = MultiHeadAttention(d_model=16, n_heads=4).half()
    with pitfalls.inject(half, "finite_mask_fill", fill=-1e9), pytest.raises(RuntimeError, match="overflow"):
        half(x.half(), ctx=attention_inputs(half, x.half(), mask=mask))


def test_inf_fill_without_guard_gives_nan_on_empty_rows():
    torch.manual_seed(0)
    attn = MultiHeadAttention(d_model=16, n_heads=4).double()
    x = torch.randn(2, 6, 16, dtype=torch.float64)
    mask = torch.ones(2, 1, 6, 6, dtype=torch.bool)
    mask[1, :, :2] = False
    _, bad = check_isolation("inf_fill_no_guard", attn, lambda m: m(x, ctx=attention_inputs(m, x, mask=mask))[0])
    assert torch.isnan(bad[1, :2]).all() and torch.isfinite(bad[0]).all()


def test_padding_mask_on_queries_lets_real_tokens_see_padding():
    model = make("encoder")
    other_pad = IDS.clone()
    other_pad[1, 4:] = 17
    check_isolation("padding_mask_on_queries", model, lambda m: hidden(m, IDS, MASK))
    ok = (hidden(model, IDS, MASK)[1, :4] - hidden(model, other_pad, MASK)[1, :4]).abs().max()
    with pitfalls.inject(model, "padding_mask_on_queries"):
        leak = (hidden(model, IDS, MASK)[1, :4] - hidden(model, other_pad, MASK)[1, :4]).abs().max()
    assert ok == 0 and leak > 1e-6


def test_shared_layernorm_uses_one_module_for_both_sublayers():
    model = make("encoder")
    block = model.stack.blocks[0]
    ref, bad = check_isolation("shared_layernorm", model, lambda m: hidden(m, IDS))
    n_params = len(list(model.parameters()))
    with pitfalls.inject(model, "shared_layernorm"):
        assert block.ffn_add_norm.norm is block.attn_add_norm.norm
        assert len(list(model.parameters())) == n_params - 2 * len(model.stack.blocks)  # one gamma, one beta fewer
    assert block.ffn_add_norm.norm is not block.attn_add_norm.norm
    assert not torch.allclose(ref, bad)


@pytest.mark.parametrize("placement", ["post", "pre"])
def test_no_residual_and_norm_on_residual_path_change_the_block(placement):
    model = make("encoder", norm_position=placement)
    for name in ("no_residual", "norm_on_residual_path"):
        ref, bad = check_isolation(name, model, lambda m: hidden(m, IDS))
        assert (ref - bad).abs().max() > 1e-3
    block, x = model.stack.blocks[0], torch.randn(1, 4, 16, dtype=torch.float64)
    an = block.attn_add_norm
    with pitfalls.inject(model, "norm_on_residual_path"):
        out = an.after(x, torch.zeros_like(x))
    assert torch.allclose(out, an.norm(x))  # the residual now carries norm(x), not x


def test_large_init_scale_saturates_softmax_and_restores_weights_exactly():
    torch.manual_seed(0)
    cfg = ModelConfig(architecture="encoder", vocab_size=V, d_model=64, n_heads=4, n_layers=1, norm_position="post")
    model = build_model(cfg).double().eval()  # the usual N(0, 0.02) init
    before = {k: v.clone() for k, v in model.state_dict().items()}
    check_isolation("large_init_scale", model, lambda m: hidden(m, IDS))
    peak_ok = model(IDS, output_attentions=True).attentions[0].max(-1).values.mean()
    with pitfalls.inject(model, "large_init_scale"):
        peak_bad = model(IDS, output_attentions=True).attentions[0].max(-1).values.mean()
    assert peak_bad > 0.9 and peak_bad > peak_ok + 0.2
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_batchnorm_makes_a_token_depend_on_the_rest_of_the_batch():
    model = make("encoder").train()
    model.apply(lambda m: setattr(m, "p", 0.0) if isinstance(m, torch.nn.Dropout) else None)
    alone = lambda m: hidden(m, IDS[:1])[0]  # noqa: E731
    batch = lambda m: hidden(m, IDS)[0]  # noqa: E731
    assert torch.allclose(alone(model), batch(model), atol=1e-12)
    check_isolation("batchnorm_instead_of_layernorm", model, batch)
    with pitfalls.inject(model, "batchnorm_instead_of_layernorm"):
        assert (alone(model) - batch(model)).abs().max() > 1e-3


def test_no_positional_makes_the_encoder_permutation_equivariant():
    model = make("encoder")
    perm = torch.tensor([5, 2, 0, 4, 1, 3])
    x = IDS[:1]
    ref, bad = check_isolation("no_positional", model, lambda m: hidden(m, x))
    assert not torch.allclose(hidden(model, x[:, perm]), ref[:, perm])
    with pitfalls.inject(model, "no_positional"):
        assert torch.allclose(hidden(model, x[:, perm]), bad[:, perm], atol=1e-10)


@pytest.mark.parametrize(
    "name", ["no_scaling", "split_without_transpose", "merge_wrong_transpose", "causal_off_by_one"]
)
def test_a_wrapped_attention_decodes_through_the_view_with_its_fault(name):
    """The decode step runs the modules' own code on a flat view, wrappers included: a fault is decoded as the
    module path decodes it (same tokens), and gone again after the block."""
    from anatomy.generation import generate
    from anatomy.generation.fast import refusal

    model = make("decoder_lm", positional="learned")
    clean = generate(model, IDS[:1], max_new_tokens=4)
    with pitfalls.inject(model, name):
        assert refusal(model) is None
        tokens = generate(model, IDS[:1], max_new_tokens=4, fast=True)
        assert torch.equal(tokens, generate(model, IDS[:1], max_new_tokens=4, fast=False))
        scores = model(IDS[:1]).logits
    assert torch.equal(generate(model, IDS[:1], max_new_tokens=4), clean)
    assert not torch.allclose(scores, model(IDS[:1]).logits)  # the fault was active while decoding


# --- the learners' slips of issue 29 --------------------------------------------------------------------------


def _qkv(s=7):
    torch.manual_seed(0)
    return (torch.randn(2, 4, n, 8, dtype=torch.float64) for n in (5, s, s))


def _wrapped(name, **params):
    """Fault ``name``'s wrapper around the ``attend`` step of a math-kernel module, as a function of heads
    ``q (B, 4, T, Dh)``, ``k, v (B, 4, S, Dh)`` over a context with no mask."""
    _, _, make, *_ = faults.WRAPPERS[name]
    attn = MultiHeadAttention(d_model=32, n_heads=4, kernel="math").double()
    step = make(**params)(MultiHeadAttention.attend)

    def call(q, k, v, *, scale, need_weights=False):
        ctx = build_context(b=q.shape[0], t=q.shape[-2], s=k.shape[-2], device="cpu", cross=True)
        return step(attn, q, k, v, ctx, kernels.AttentionArgs(scale=scale, need_weights=need_weights))

    return call


@pytest.mark.parametrize("dim, over", [(1, 1), (-2, 2)])
def test_softmax_wrong_axis_normalises_over_heads_or_queries(dim, over):
    q, k, v = _qkv()
    out, w = _wrapped("softmax_wrong_axis", dim=dim)(q, k, v, scale=0.3, need_weights=True)
    one = torch.ones((), dtype=w.dtype)
    assert torch.allclose(w.sum(over), one, atol=1e-12) and not torch.allclose(w.sum(-1), one)
    assert torch.allclose(out, w @ v)


def test_scale_after_softmax_scales_the_weights_not_the_scores():
    q, k, v = _qkv()
    out, w = _wrapped("scale_after_softmax")(q, k, v, scale=0.3, need_weights=True)
    ref, w1 = kernels.math_attention(q, k, v, kernels.AttentionArgs(scale=1.0, need_weights=True))
    assert torch.allclose(w, 0.3 * w1) and torch.allclose(out, 0.3 * ref)


def test_scale_from_wrong_size_uses_the_key_length():
    q, k, v = _qkv(s=7)
    out, _ = _wrapped("scale_from_wrong_size")(q, k, v, scale=0.3)
    ref, _ = kernels.math_attention(q, k, v, kernels.AttentionArgs(scale=1 / math.sqrt(7)))
    assert torch.allclose(out, ref)


def test_dropout_at_eval_changes_the_output_from_call_to_call_and_is_undone():
    model = make()
    ids = IDS[:1]
    right = hidden(model, ids)
    with pitfalls.inject(model, "dropout_at_eval", p=0.5):
        a, b = hidden(model, ids), hidden(model, ids)
        assert not torch.allclose(a, b) and not model.training
    assert torch.equal(hidden(model, ids), right)


def test_heads_interleaved_is_the_post_split_of_rows_laid_out_across_heads():
    """The fault gives head h the features h, h + H, ...: the correct module with its q/k/v rows permuted that way
    computes the same."""
    torch.manual_seed(0)
    attn = MultiHeadAttention(d_model=16, n_heads=4, kernel="math").double().eval()
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    with pitfalls.inject(attn, "heads_interleaved"):
        bad = attn(x)[0]
    twin = copy.deepcopy(attn)
    order = torch.tensor([j * 4 + h for h in range(4) for j in range(4)])
    with torch.no_grad():
        for lin in (twin.q_proj, twin.k_proj, twin.v_proj):
            lin.weight.copy_(lin.weight[order])
            if lin.bias is not None:
                lin.bias.copy_(lin.bias[order])
    assert torch.allclose(bad, twin(x)[0], atol=1e-12) and not torch.allclose(bad, attn(x)[0])
