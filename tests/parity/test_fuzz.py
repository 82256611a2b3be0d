"""Fuzz the attention module: random shapes, masks, dtypes, kernels and positional schemes.

Each case runs one kernel in one dtype, forward and backward, next to the ``math`` kernel in float64 with the same
weights (the reference), and asserts: no NaN or Inf anywhere (output, input and parameter gradients), exactly zero
kernel output on query rows that see no key, and agreement with the reference to a tolerance set by the dtype.

The default profile runs a few hundred cases; ``HYPOTHESIS_PROFILE=fuzz`` runs at least 10,000::

    HYPOTHESIS_PROFILE=fuzz python -m pytest tests/parity/test_fuzz.py -q
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from anatomy.components import MultiHeadAttention
from anatomy.components.inputs import attention_inputs
from anatomy.components.masks import causal_mask, combine, padding_mask
from anatomy.components.positional import ALiBiPositional, RotaryPositional, ShawRelativePositional, T5RelativeBias

# forward / backward tolerance, relative to the reference's largest entry (and at least 1)
TOLERANCE = {  # about 5x the worst error seen in 2,500 calibration cases (max |error| / (1 + max |reference|))
    torch.float64: (1e-10, 1e-8),
    torch.float32: (1e-5, 5e-5),
    torch.float16: (4e-3, 1.5e-2),
    torch.bfloat16: (3e-2, 6e-2),
}
MASK_KINDS = [
    "none",
    "padding",
    "left padding",
    "random",
    "causal",
    "causal+padding",
    "causal+left padding",
    "all hidden",
]


@st.composite
def cases(draw):
    b, t = draw(st.integers(1, 3), label="B"), draw(st.integers(1, 9), label="T")
    h = draw(st.sampled_from([1, 2, 4]), label="H")
    hkv = draw(st.sampled_from([d for d in (1, 2, 4) if h % d == 0]), label="Hkv")
    dh = draw(st.sampled_from([2, 4, 8]), label="Dh")
    cross = draw(st.booleans(), label="cross attention")
    s = draw(st.integers(1, 9), label="S") if cross else t
    positional = "none" if cross else draw(st.sampled_from(["none", "rope", "alibi", "shaw", "t5"]), label="positional")
    kernel = draw(st.sampled_from(["loop", "math", "sdpa"]), label="kernel")
    dtype = draw(st.sampled_from(list(TOLERANCE)), label="dtype")
    kind = draw(st.sampled_from(MASK_KINDS), label="mask")
    if "causal" in kind and s < t:  # a causal mask needs S >= T (queries are the last T keys)
        kind = "random"
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1), label="mask seed"))
    mask = None
    if "padding" in kind:
        pad = padding_mask(torch.randint(0, s + 1, (b,), generator=g), s)  # length 0: pure padding
        mask = (pad.flip(-1) if "left" in kind else pad)[:, None, None]  # (B, 1, 1, S)
    elif kind == "random":
        shape = (draw(st.sampled_from([1, b])), draw(st.sampled_from([1, h])), t, s)
        mask = torch.rand(shape, generator=g) < draw(st.sampled_from([0.1, 0.5, 0.9]), label="keep")
    elif kind == "all hidden":
        mask = torch.zeros(b, 1, t, s, dtype=torch.bool)
    return dict(
        b=b,
        t=t,
        s=s,
        h=h,
        hkv=hkv,
        dh=dh,
        cross=cross,
        positional=positional,
        kernel=kernel,
        dtype=dtype,
        mask=mask,
        is_causal="causal" in kind,
        bias=draw(st.booleans(), label="bias"),
        seed=draw(st.integers(0, 2**31 - 1), label="seed"),
    )


def build(case: dict, kernel: str) -> MultiHeadAttention:
    h, dh = case["h"], case["dh"]
    scheme = {
        "rope": lambda: RotaryPositional(head_dim=dh, base=100.0),
        "alibi": lambda: ALiBiPositional(n_heads=h),
        "shaw": lambda: ShawRelativePositional(head_dim=dh, max_relative_distance=3),
    }.get(case["positional"])
    torch.manual_seed(case["seed"])
    m = MultiHeadAttention(
        d_model=h * dh,
        n_heads=h,
        n_kv_heads=case["hkv"],
        kernel=kernel,
        bias=case["bias"],
        positional=None if scheme is None else scheme(),
    )
    if case["positional"] == "shaw":
        torch.nn.init.normal_(m.positional.key_embeddings, std=0.5)
        torch.nn.init.normal_(m.positional.value_embeddings, std=0.5)
    return m


def forward_backward(m: MultiHeadAttention, case: dict, dtype: torch.dtype):
    g = torch.Generator().manual_seed(case["seed"] + 1)
    d = case["h"] * case["dh"]
    x = torch.randn(case["b"], case["t"], d, generator=g).to(dtype).requires_grad_(True)
    context = (
        torch.randn(case["b"], case["s"], d, generator=g).to(dtype).requires_grad_(True) if case["cross"] else None
    )
    positions = torch.randint(0, 40, (1, case["t"]), generator=g) + torch.arange(case["t"])
    bias = None
    if case["positional"] == "t5":
        t5 = T5RelativeBias(n_heads=case["h"], bidirectional=not case["is_causal"], num_buckets=8, max_distance=16)
        torch.nn.init.normal_(t5.relative_attention_bias.weight, std=0.5, generator=g)
        with torch.no_grad():
            bias = t5.score_bias(None, positions, positions, 1.0).to(dtype)  # (1, H, T, T)
    upstream = torch.randn(case["b"], case["t"], d, generator=g).to(dtype)
    seen = {}
    m.hook_z.register_forward_hook(lambda mod, args, out: seen.__setitem__("z", out.detach()))
    out, _ = m(
        x,
        ctx=attention_inputs(
            m,
            x,
            context,
            mask=case["mask"],
            is_causal=case["is_causal"],
            positions=None if case["cross"] else positions,
            attn_bias=bias,
        ),
        context=context,
    )
    (out * upstream).sum().backward()
    grads = {"x": x.grad, **({"context": context.grad} if context is not None else {})}
    grads.update({n: p.grad for n, p in m.named_parameters()})
    return out.detach(), seen["z"], grads


@settings(max_examples=max(300, settings.default.max_examples))
@given(case=cases())
def test_fuzz_attention(case):
    dtype, kernel = case["dtype"], case["kernel"]
    reference = build(case, "math").double()
    m = build(case, kernel).to(dtype)
    if kernel == "sdpa" and case["positional"] == "shaw":
        with pytest.raises(ValueError, match="kernel='sdpa'"):
            forward_backward(m, case, dtype)
        return
    want, _, want_grads = forward_backward(reference, case, torch.float64)
    out, z, grads = forward_backward(m, case, dtype)

    assert out.dtype == dtype
    assert torch.isfinite(out).all(), "NaN/Inf in the output"
    for name, grad in grads.items():
        assert grad is not None and torch.isfinite(grad).all(), f"NaN/Inf in the gradient of {name}"
    b, h, t, s = case["b"], case["h"], case["t"], case["s"]
    full = combine(case["mask"], causal_mask(t, s) if case["is_causal"] else None)
    if full is not None:
        hidden = ~full.expand(b, h, t, s).any(-1)  # (B, H, T)
        assert torch.all(z[hidden] == 0), "a query row with no visible key must give exactly 0"

    atol, gtol = TOLERANCE[dtype]
    scale = 1.0 + float(want.abs().max())
    assert float((out.double() - want).abs().max()) <= atol * scale, "forward disagrees with float64 math"
    for name, grad in grads.items():
        ref = want_grads[name]
        err = float((grad.double() - ref).abs().max())
        assert err <= gtol * (1.0 + float(ref.abs().max())), f"gradient of {name} disagrees (max error {err:.3g})"
