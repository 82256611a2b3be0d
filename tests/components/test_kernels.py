"""The kernel matrix: loop, math and sdpa compute the same function (float64, forward and backward)."""

from __future__ import annotations

import pytest
import torch

from anatomy.components import MultiHeadAttention, kernels
from anatomy.components.inputs import attention_inputs
from anatomy.components.masks import causal_mask, combine, key_padding_to_attention, padding_mask
from anatomy.components.positional import (
    ALiBiPositional,
    RotaryPositional,
    ShawRelativePositional,
    T5RelativeBias,
)
from anatomy.inspection.weights import attention_weights

B, T, D, H = 3, 7, 32, 4


def _masks(name: str):
    pad = key_padding_to_attention(padding_mask([7, 4, 2], T))  # (B, 1, 1, S)
    if name == "none":
        return None, False
    if name == "padding":
        return pad, False
    if name == "causal":
        return None, True
    if name == "padding+causal":
        return pad, True
    if name == "fully-masked":  # batch row 2 sees no key at all; row 1 hides two query rows
        m = torch.ones(B, 1, T, T, dtype=torch.bool)
        m[2] = False
        m[1, :, 3:5] = False
        return m, False
    raise KeyError(name)


MASKS = ["none", "padding", "causal", "padding+causal", "fully-masked"]
SCHEMES = ["none", "rope", "rope-interleaved", "alibi", "t5", "shaw"]


def _positional(name: str):
    return {
        "none": None,
        "rope": RotaryPositional(head_dim=D // H),
        "rope-interleaved": RotaryPositional(head_dim=D // H, layout="interleaved"),
        "alibi": ALiBiPositional(n_heads=H),
        "shaw": ShawRelativePositional(head_dim=D // H, max_relative_distance=3),
        "t5": None,
    }[name]


def _run(attn, kernel, x, mask, is_causal, bias):
    attn.kernel = kernel
    x = x.clone().requires_grad_(True)
    attn.zero_grad()
    out, _ = attn(x, ctx=attention_inputs(attn, x, mask=mask, is_causal=is_causal, attn_bias=bias))
    (out * torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view_as(out)).sum().backward()
    grads = [x.grad] + [p.grad.clone() for p in attn.parameters()]
    return out.detach(), grads


@pytest.mark.parametrize("mask_name", MASKS)
@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("n_kv_heads", [H, 2, 1])
def test_kernels_agree_forward_and_backward(mask_name, scheme, n_kv_heads):
    torch.manual_seed(0)
    attn = MultiHeadAttention(d_model=D, n_heads=H, n_kv_heads=n_kv_heads, positional=_positional(scheme)).double()
    x = torch.randn(B, T, D, dtype=torch.float64)
    mask, is_causal = _masks(mask_name)
    bias = None
    if scheme == "t5":
        t5 = T5RelativeBias(n_heads=H, num_buckets=8, max_distance=16).double()
        torch.nn.init.normal_(t5.relative_attention_bias.weight)
        pos = torch.arange(T)[None]
        bias = t5.score_bias(None, pos, pos, 1.0).detach()
    ref_out, ref_grads = _run(attn, "loop", x, mask, is_causal, bias)
    for kernel in ("math", "sdpa", "auto"):
        if kernel == "sdpa" and scheme == "shaw":
            with pytest.raises(ValueError, match="value term"):
                _run(attn, kernel, x, mask, is_causal, bias)
            continue
        out, grads = _run(attn, kernel, x, mask, is_causal, bias)
        assert (out - ref_out).abs().max() <= 1e-10, kernel
        for g, rg in zip(grads, ref_grads):
            assert (g - rg).abs().max() <= 1e-8, kernel
    if mask_name == "fully-masked":  # rows with no visible key: exact zeros before the output projection
        attn.kernel = "math"
        with torch.no_grad():
            z = {}
            h = attn.hook_z.register_forward_hook(lambda m, a, o: z.setdefault("z", o))
            attn(x, ctx=attention_inputs(attn, x, mask=mask))
            h.remove()
        assert torch.count_nonzero(z["z"][2]) == 0
        assert torch.count_nonzero(z["z"][1, :, 3:5]) == 0


@pytest.mark.parametrize("mask_name", ["padding+causal", "fully-masked"])
@pytest.mark.parametrize("n_kv_heads,fused", [(3, False), (1, True)])
def test_kernels_agree_with_decoupled_head_width(mask_name, n_kv_heads, fused):
    """head_dim set: 3 heads of 20 on d_model 32 (H·Dh = 60), RoPE on the 20-wide heads."""
    torch.manual_seed(0)
    attn = MultiHeadAttention(
        d_model=D,
        n_heads=3,
        n_kv_heads=n_kv_heads,
        head_dim=20,
        fused_qkv=fused,
        positional=RotaryPositional(head_dim=20),
    ).double()
    assert attn.scale == 20**-0.5 and attn.o_proj.in_features == 60
    x = torch.randn(B, T, D, dtype=torch.float64)
    mask, is_causal = _masks(mask_name)
    ref_out, ref_grads = _run(attn, "loop", x, mask, is_causal, None)
    assert ref_out.shape == (B, T, D)
    for kernel in ("math", "sdpa"):
        out, grads = _run(attn, kernel, x, mask, is_causal, None)
        assert (out - ref_out).abs().max() <= 1e-10, kernel
        for g, rg in zip(grads, ref_grads):
            assert (g - rg).abs().max() <= 1e-8, kernel


@pytest.mark.parametrize("causal", [True, False])
def test_sliding_window_is_a_band_every_kernel_obeys(causal):
    from anatomy.components.masks import sliding_window_mask

    torch.manual_seed(0)
    w = 3
    attn = MultiHeadAttention(
        d_model=D, n_heads=H, n_kv_heads=2, sliding_window=w, positional=RotaryPositional(head_dim=D // H)
    ).double()
    x = torch.randn(B, T, D, dtype=torch.float64)
    pad = key_padding_to_attention(padding_mask([7, 5, 6], T))
    ref_out, ref_grads = _run(attn, "loop", x, pad, causal, None)
    for kernel in ("math", "sdpa"):
        out, grads = _run(attn, kernel, x, pad, causal, None)
        assert (out - ref_out).abs().max() <= 1e-10, kernel
        for g, rg in zip(grads, ref_grads):
            assert (g - rg).abs().max() <= 1e-8, kernel
    # the band, spelled out: the same module without a window but with the band as its mask gives the same output
    band = sliding_window_mask(T, T, w, causal=causal)
    attn.sliding_window = None
    banded, _ = _run(attn, "math", x, pad & band, False, None)
    torch.testing.assert_close(banded, ref_out, rtol=0, atol=1e-10)
    assert (_run(attn, "math", x, pad, causal, None)[0] - ref_out).abs().max() > 1e-3  # the window matters
    # tokens 0..3 lie outside query 6's band (slots 4..6, or 4..8 without causality): they cannot move its output
    attn.sliding_window = w
    with torch.no_grad():
        moved = x.clone()
        moved[0, : 7 - w] += 5.0
        out_a, _ = attn(x, ctx=attention_inputs(attn, x, mask=pad, is_causal=causal))
        out_b, _ = attn(moved, ctx=attention_inputs(attn, moved, mask=pad, is_causal=causal))
    assert torch.equal(out_a[0, 6], out_b[0, 6]) and not torch.equal(out_a[0, 5], out_b[0, 5])


def test_auto_uses_sdpa_unless_weights_are_asked(monkeypatch):
    calls = []
    for name, k in kernels.KERNELS.items():
        monkeypatch.setitem(
            kernels.KERNELS,
            name,
            kernels.Kernel(
                k.name,
                lambda *a, _n=name, _f=k.fn, **kw: (calls.append(_n), _f(*a, **kw))[1],
                k.returns_weights,
                k.supports_value_bias,
            ),
        )
    attn = MultiHeadAttention(d_model=D, n_heads=H)
    x = torch.randn(B, T, D)
    attn(x)
    assert calls == ["sdpa"]
    _, w = attn(x, need_weights=True)
    assert calls[-1] == "math" and w.shape == (B, H, T, T)
    assert torch.allclose(w.sum(-1), torch.ones(B, H, T))
    h = attn.hook_scores.register_forward_hook(lambda *a: None)
    attn(x)
    assert calls[-1] == "math"
    h.remove()
    attn(x)
    assert calls[-1] == "sdpa"


def test_sdpa_gets_is_causal_flag_for_a_purely_causal_square_mask(monkeypatch):
    seen = {}
    real = torch.nn.functional.scaled_dot_product_attention

    def spy(q, k, v, **kw):
        seen.update(kw)
        return real(q, k, v, **kw)

    monkeypatch.setattr(kernels.F, "scaled_dot_product_attention", spy)
    attn = MultiHeadAttention(d_model=D, n_heads=H, kernel="sdpa")
    x = torch.randn(B, T, D)
    attn(x, attention_inputs(attn, x, is_causal=True))
    assert seen["is_causal"] is True and seen["attn_mask"] is None
    pad = key_padding_to_attention(padding_mask([7, 4, 2], T))
    attn(x, attention_inputs(attn, x, is_causal=True, mask=pad))
    assert seen["is_causal"] is False and seen["attn_mask"].shape == (B, 1, T, T)


@pytest.mark.parametrize("mask_name", MASKS)
@pytest.mark.parametrize("n_kv_heads", [2, 1])
def test_sdpa_repeating_kv_heads_equals_handing_them_grouped(monkeypatch, mask_name, n_kv_heads):
    """Where no fused kernel takes grouped K/V (CUDA: float32, or a mask without cuDNN) sdpa repeats them to every
    query head: the same function, forward and backward, and SDPA then sees H heads without enable_gqa."""
    mask, is_causal = _masks(mask_name)
    torch.manual_seed(0)
    attn = MultiHeadAttention(d_model=D, n_heads=H, n_kv_heads=n_kv_heads, kernel="sdpa").double()
    x = torch.randn(B, T, D, dtype=torch.float64)
    grouped = _run(attn, "sdpa", x, mask, is_causal, None)
    seen = {}
    real = torch.nn.functional.scaled_dot_product_attention

    def spy(q, k, v, **kw):
        seen.update(kv_heads=k.shape[1], enable_gqa=kw["enable_gqa"])
        return real(q, k, v, **kw)

    monkeypatch.setattr(kernels, "native_gqa", lambda *args: False)
    monkeypatch.setattr(kernels.F, "scaled_dot_product_attention", spy)
    repeated = _run(attn, "sdpa", x, mask, is_causal, None)
    assert seen == {"kv_heads": H, "enable_gqa": False}
    torch.testing.assert_close(repeated[0], grouped[0], rtol=1e-12, atol=1e-12)
    for a, b in zip(repeated[1], grouped[1]):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


class _FakeCuda:
    """Stands in for a CUDA tensor in :func:`kernels.native_gqa` (this machine has no GPU)."""

    def __init__(self, dtype):
        self.device, self.dtype = torch.device("cuda"), dtype


@pytest.mark.parametrize("flash, cudnn, expected", [(True, False, True), (False, True, True), (False, False, False)])
def test_grouped_heads_go_to_sdpa_as_they_are_only_where_a_fused_kernel_takes_them(monkeypatch, flash, cudnn, expected):
    cuda = torch.backends.cuda
    monkeypatch.setattr(cuda, "SDPAParams", lambda *args: args)
    monkeypatch.setattr(cuda, "can_use_flash_attention", lambda params: flash)
    monkeypatch.setattr(cuda, "can_use_cudnn_attention", lambda params: cudnn)
    monkeypatch.setattr(cuda, "flash_sdp_enabled", lambda: True)
    monkeypatch.setattr(cuda, "cudnn_sdp_enabled", lambda: True)
    q = _FakeCuda(torch.bfloat16)
    assert kernels.native_gqa(q, q, q, None, 0.0, True) is expected
    monkeypatch.setattr(cuda, "flash_sdp_enabled", lambda: False)  # sdpa_kernel([...]) switched flash off
    monkeypatch.setattr(cuda, "cudnn_sdp_enabled", lambda: False)
    assert kernels.native_gqa(q, q, q, None, 0.0, True) is False


def test_grouped_heads_rule_without_probes_and_on_cpu(monkeypatch):
    x = torch.randn(1, 2, 3, 4)
    assert kernels.native_gqa(x, x[:, :1], x[:, :1], None, 0.0, True) is True  # every CPU backend takes them
    monkeypatch.delattr(torch.backends.cuda, "can_use_cudnn_attention")  # an older torch: the dtype decides
    assert kernels.native_gqa(_FakeCuda(torch.float16), x, x, None, 0.0, True) is True
    assert kernels.native_gqa(_FakeCuda(torch.float16), x, x, x, 0.0, False) is False  # flash takes no mask
    assert kernels.native_gqa(_FakeCuda(torch.float32), x, x, None, 0.0, True) is False


def test_causal_mask_is_bottom_right_aligned_for_cached_decoding():
    m = causal_mask(2, 4)
    assert m.tolist() == [[True, True, True, False], [True, True, True, True]]
    assert combine(None, None) is None


def test_weights_are_not_returned_by_sdpa_and_refuse_clearly():
    attn = MultiHeadAttention(d_model=D, n_heads=H, kernel="sdpa")
    with pytest.raises(ValueError, match="cannot return attention weights"):
        attn(torch.randn(B, T, D), need_weights=True)


@pytest.mark.parametrize("kernel", ["loop", "math", "sdpa"])
def test_backward_is_bitwise_repeatable_in_deterministic_mode(kernel):
    """PyTorch's determinism check for attention (test_transformers.py): under use_deterministic_algorithms the same
    backward, run again and again, gives torch.equal gradients — GQA, padding and causal masks, RoPE included."""
    torch.manual_seed(0)
    attn = MultiHeadAttention(
        d_model=D, n_heads=H, n_kv_heads=2, kernel=kernel, positional=RotaryPositional(head_dim=D // H)
    )
    x = torch.randn(B, T, D)
    mask, _ = _masks("padding+causal")
    previous = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        runs = [_run(attn, kernel, x, mask, True, None) for _ in range(20)]
    finally:
        torch.use_deterministic_algorithms(previous)
    for out, grads in runs[1:]:
        assert torch.equal(out, runs[0][0])
        assert all(torch.equal(a, b) for a, b in zip(grads, runs[0][1]))


def test_batch_equal_to_sequence_length_keeps_the_axes_apart():
    """B == T is where a batch-first mix-up hides (PyTorch's test_transformerencoder_square_input): with B = T = 5
    every sample attends alone, exactly as when it is run by itself."""
    torch.manual_seed(0)
    attn = MultiHeadAttention(d_model=D, n_heads=H, kernel="math").double()
    x = torch.randn(5, 5, D, dtype=torch.float64)
    out, _ = attn(x, ctx=attention_inputs(attn, x, is_causal=True))
    alone = torch.cat(
        [attn(x[i : i + 1], ctx=attention_inputs(attn, x[i : i + 1], is_causal=True))[0] for i in range(5)]
    )
    torch.testing.assert_close(out, alone, rtol=0, atol=1e-12)
    other = x.transpose(0, 1).contiguous()  # the other reading of the same numbers
    swapped, _ = attn(other, attention_inputs(attn, other, is_causal=True))
    assert not torch.allclose(swapped.transpose(0, 1), out)


@pytest.mark.parametrize("kernel", ["loop", "math", "sdpa"])
def test_non_contiguous_inputs_give_the_same_output(kernel):
    """Inputs that are views (a transpose, a strided slice, an expanded mask) compute what their contiguous copies
    do: self-attention with GQA and RoPE, and cross-attention with S != T."""
    torch.manual_seed(0)
    attn = MultiHeadAttention(
        d_model=D, n_heads=H, n_kv_heads=2, kernel=kernel, positional=RotaryPositional(head_dim=D // H)
    ).double()
    base = torch.randn(T, B, D, dtype=torch.float64)
    x = base.transpose(0, 1)  # (B, T, D), not contiguous
    assert not x.is_contiguous()
    mask = key_padding_to_attention(padding_mask([7, 4, 2], T)).expand(B, 1, T, T)  # stride 0 on the query axis
    out, _ = attn(x, ctx=attention_inputs(attn, x, mask=mask, is_causal=True))
    ref, _ = attn(x.contiguous(), ctx=attention_inputs(attn, x.contiguous(), mask=mask.contiguous(), is_causal=True))
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-12)
    cross = MultiHeadAttention(d_model=D, n_heads=H, kernel=kernel).double()
    memory = torch.randn(B, 2 * T + 1, D, dtype=torch.float64)[:, ::2]  # (B, T + 1, D), every other row
    out, _ = cross(x, context=memory)
    ref, _ = cross(x.contiguous(), context=memory.contiguous())
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-12)


# ------------------------------------------------------------------------------------ float16 at large scales
# The teaching kernels once multiplied q·kᵀ in float16: scores past 65504 became inf and outputs NaN (inputs
# scaled x300: 31 of 177 loop and 44 of 182 math cases) while sdpa stayed finite. The three kernels run the same
# float16 projections here, so what is compared is the attention core alone.

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

FP16_FORWARD = 4e-3  # max |kernel - float64| / (1 + max |float64|): the float16 tolerance of tests/parity/test_fuzz.py


def _fp16_grad_tolerance(dh: int, qk_norm: str | None) -> float:
    """The input-gradient tolerance per case, with its reason. A norm over Dh numbers has a near-singular Jacobian
    when Dh <= 2 (two standardised numbers are always about ±1: the gradient through them is a difference of nearly
    equal terms), so float16 rounding is amplified there."""
    return 2.5e-1 if qk_norm is not None and dh <= 2 else 3e-2


def _relative(a: torch.Tensor, ref: torch.Tensor) -> float:
    return float((a - ref).abs().max()) / (1 + float(ref.abs().max()))


@settings(max_examples=60, deadline=None)
@given(
    scale=st.sampled_from([1.0, 10.0, 100.0, 300.0, 1000.0]),
    seed=st.integers(0, 2**16),
    dh=st.sampled_from([2, 4, 8]),
    h=st.sampled_from([1, 2]),
    causal=st.booleans(),
    qk_norm=st.sampled_from([None, "rmsnorm", "layernorm"]),
    t=st.integers(1, 8),
)
def test_float16_kernels_agree_and_stay_finite_at_large_input_scales(scale, seed, dh, h, causal, qk_norm, t):
    """Each float16 kernel against float64 math on the same (float16-rounded) weights and inputs. Outputs agree to
    FP16_FORWARD at every scale. Gradients agree to the per-case tolerance, or, once the softmax saturates (scaled
    inputs give score gaps of 1e3-1e5, and float16's rounding of q and k alone moves a score by more than 1), are
    no further from float64 than SDPA's own float16 gradient (the peer that defines "fp16 works"). Outputs follow the
    same rule: within FP16_FORWARD, or within 1.5x SDPA's own distance from float64."""
    torch.manual_seed(seed)
    x = (torch.randn(2, t, h * dh) * scale).half()
    upstream = torch.randn(2, t, h * dh).half()
    outs, grads = {}, {}
    for kernel, dtype in (("loop", torch.half), ("math", torch.half), ("sdpa", torch.half), ("ref", torch.double)):
        torch.manual_seed(seed + 1)
        m = (
            MultiHeadAttention(d_model=h * dh, n_heads=h, kernel="math" if kernel == "ref" else kernel, qk_norm=qk_norm)
            .half()
            .to(dtype)
        )
        xi = x.to(dtype).clone().requires_grad_(True)
        out, _ = m(xi, ctx=attention_inputs(m, xi, is_causal=causal))
        (out * upstream.to(dtype)).sum().backward()
        assert torch.isfinite(out).all(), f"{kernel}: inf/NaN in the float16 output at input scale {scale}"
        outs[kernel], grads[kernel] = out.detach().double(), xi.grad.double()
    ref, ref_grad = outs.pop("ref"), grads.pop("ref")
    gtol = _fp16_grad_tolerance(dh, qk_norm)
    sdpa_gerr = _relative(grads["sdpa"], ref_grad) if torch.isfinite(grads["sdpa"]).all() else float("inf")
    sdpa_err = _relative(outs["sdpa"], ref)
    for kernel in ("loop", "math"):
        err = _relative(outs[kernel], ref)
        assert err <= max(FP16_FORWARD, 1.5 * sdpa_err), f"{kernel} vs float64 at scale {scale}: {err:.2e}"
        if sdpa_gerr == float("inf"):  # the float16 projections' backward overflowed for every kernel
            continue
        assert torch.isfinite(grads[kernel]).all(), f"{kernel}: inf/NaN in the input gradient at scale {scale}"
        gerr = _relative(grads[kernel], ref_grad)
        assert gerr <= max(gtol, 1.5 * sdpa_gerr), (
            f"{kernel} input gradient at scale {scale}, Dh={dh}, qk_norm={qk_norm}: {gerr:.2e} "
            f"(tolerance {gtol:g}, sdpa's own error {sdpa_gerr:.2e})"
        )


def test_float16_scores_past_65504_are_kept_in_float32():
    torch.manual_seed(0)
    m = MultiHeadAttention(d_model=8, n_heads=2, kernel="math").half()
    x = (torch.randn(1, 6, 8) * 300).half()
    seen = {}
    m.hook_scores.register_forward_hook(lambda mod, a, out: seen.__setitem__("s", out.detach()))
    out, _ = m(x)
    assert seen["s"].dtype == torch.float32 and float(seen["s"].abs().max()) > 65504  # would be inf in float16
    assert out.dtype == torch.float16 and torch.isfinite(out).all()


FP16_GRID = [
    (scale, positional, masking, seed)
    for scale in (100.0, 300.0, 1000.0, 3000.0)
    for positional in ("none", "rope", "alibi")
    for masking in ("none", "causal", "padding", "window")
    for seed in range(3)
]


@pytest.mark.parametrize("kernel", ["math", "loop"])
def test_the_teaching_kernels_give_finite_float16_output_at_input_scale_100_and_more(kernel):
    """144 cases per kernel (input scale 100 to 3000, three positional schemes, four mask kinds, GQA): the float16
    output of ``math`` and ``loop`` is finite in every one, as SDPA's is (issue 24, loose end of item 8)."""
    from anatomy.components.positional import positional_class

    bad = []
    for scale, positional, masking, seed in FP16_GRID:
        torch.manual_seed(seed)
        scheme = {
            "none": None,
            "rope": lambda: positional_class("rope")(head_dim=8, max_seq_len=32),
            "alibi": lambda: positional_class("alibi")(n_heads=4),
        }[positional]
        attn = (
            MultiHeadAttention(
                d_model=32,
                n_heads=4,
                n_kv_heads=2,
                kernel=kernel,
                positional=None if scheme is None else scheme(),
                sliding_window=3 if masking == "window" else None,
            )
            .half()
            .eval()
        )
        x = (torch.randn(2, 9, 32) * scale).half()
        padding = torch.ones(2, 9, dtype=torch.bool)
        padding[1, :4] = False
        with torch.no_grad():
            out, _ = attn(
                x,
                ctx=attention_inputs(
                    attn,
                    x,
                    is_causal=masking in ("causal", "window"),
                    key_padding_mask=padding if masking == "padding" else None,
                ),
            )
        if not torch.isfinite(out).all():
            bad.append((scale, positional, masking, seed))
    assert not bad, f"{kernel}: non-finite float16 output in {len(bad)} of {len(FP16_GRID)} cases: {bad[:5]}"


def test_the_kernel_is_resolved_once_per_setting_not_per_call(monkeypatch):
    calls = []
    real = kernels.resolve
    monkeypatch.setattr(kernels, "resolve", lambda *a, **kw: (calls.append(a[0]), real(*a, **kw))[1])
    attn = MultiHeadAttention(d_model=D, n_heads=H)
    x = torch.randn(B, T, D)
    for _ in range(3):
        attn(x, ctx=attention_inputs(attn, x, is_causal=True))
    assert calls == ["auto"]
    attn(x, need_weights=True)  # another kind of call: resolved once more, then memoised too
    attn(x, need_weights=True)
    assert calls == ["auto", "auto"]
    attn.kernel = "math"
    attn(x)
    attn(x)
    assert calls == ["auto", "auto", "math"]
    with attention_weights(attn):  # the recorder wraps the instance's step: nothing is resolved again
        attn(x)
    attn(x)
    assert calls == ["auto", "auto", "math"]
    with pytest.raises(ValueError, match="unknown kernel 'nope'; valid names: loop, math, sdpa, auto"):
        attn.kernel = "nope"
    assert attn.kernel == "math"  # the refused name left the old one in place


def test_the_kernel_function_gets_every_argument_explicitly(monkeypatch):
    """A kernel of one's own (``kernels.register``) receives the mask plan's entry, the scale, the dropout, the hooks
    and the soft-cap as arguments, and the module's ``kernel_args`` bound."""
    seen = {}

    def mine(q, k, v, args, *, tag=None):
        seen.update(vars(args), tag=tag)
        return kernels.math_attention(q, k, v, args)

    monkeypatch.setitem(kernels.KERNELS, "mine", kernels.Kernel("mine", mine, True, False))
    attn = MultiHeadAttention(d_model=D, n_heads=H, dropout=0.25, scale=0.3, softcap=5.0).eval()
    attn.kernel, attn.kernel_args = "mine", {"tag": 7}
    x = torch.randn(B, T, D)
    attn(x, ctx=attention_inputs(attn, x, is_causal=True))
    assert (seen["scale"], seen["dropout_p"], seen["softcap"], seen["tag"]) == (0.3, 0.0, 5.0, 7)
    assert seen["score_hook"] is attn.hook_scores and not seen["is_causal"]
    assert torch.equal(seen["mask"], causal_mask(T, T)[None, None])  # the plan folded the causal rule in
    attn.train()
    attn(x)
    assert seen["dropout_p"] == 0.25 and seen["mask"] is None
