"""One forward, one context: the mask is checked once and RoPE's table computed once, whatever the depth."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import pytest
import torch

from anatomy import ModelConfig, build_model, shapes
from anatomy.components import context, masks
from anatomy.components.context import build_context
from anatomy.components.positional.rope import RotaryPositional

V = 50


def _model(architecture: str, n_layers: int, **kw):
    torch.manual_seed(0)
    cfg = ModelConfig(
        architecture=architecture, vocab_size=V, d_model=32, n_heads=4, n_layers=n_layers, max_seq_len=32, **kw
    )
    return build_model(cfg).eval()


def _counted(monkeypatch, owner, name: str) -> list:
    calls = []
    real = getattr(owner, name)

    def spy(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, spy)
    return calls


def _mask_checks(monkeypatch) -> list:
    """Calls of the two padding checks, wherever they are called from: a layer's or a stack's (boolean
    ``key_padding_mask``: ``context.key_padding``) and a model's (HF's 0/1: ``context.hf_padding``)."""
    calls: list = []
    for name in ("hf_padding", "key_padding"):
        real = getattr(context, name)

        def spy(*args, real=real, **kwargs):
            calls.append(1)
            return real(*args, **kwargs)

        for module in list(sys.modules.values()):
            if getattr(module, "__name__", "").startswith("anatomy") and getattr(module, name, None) is real:
                monkeypatch.setattr(module, name, spy)
    return calls


IDS = torch.tensor([[3, 5, 7, 9, 11, 13], [0, 0, 8, 10, 12, 14]])
MASK = torch.tensor([[1, 1, 1, 1, 1, 1], [0, 0, 1, 1, 1, 1]])


@pytest.mark.parametrize("n_layers", [1, 4])
def test_a_decoder_lm_forward_checks_its_padding_mask_once(monkeypatch, n_layers):
    model = _model("decoder_lm", n_layers, positional="rope", norm_position="pre", norm="rmsnorm")
    checks = _mask_checks(monkeypatch)
    tables = _counted(monkeypatch, RotaryPositional, "cos_sin")
    with torch.no_grad():
        logits = model(IDS, MASK).logits
    assert len(checks) == 1, "the mask is checked once per forward, not once per layer"
    assert len(tables) == 1, "RoPE's cos/sin are computed once per forward, not once per layer"
    assert logits.shape == (2, 6, V) and not logits.isnan().any()


def test_a_seq2seq_forward_checks_each_of_its_three_masks_once(monkeypatch):
    model = _model("seq2seq", 4)
    checks = _mask_checks(monkeypatch)
    with torch.no_grad():
        model(IDS, MASK, decoder_input_ids=IDS[:, :4], decoder_attention_mask=MASK[:, :4])
    assert len(checks) == 3  # the encoder's padding, the decoder's padding, the memory's padding: once each


def test_cached_decoding_builds_one_table_and_one_mask_per_step(monkeypatch):
    model = _model("decoder_lm", 4, positional="rope", sliding_window=3)
    caches = model.new_caches()
    with torch.no_grad():
        model(IDS, MASK, kv_caches=caches)
        tables = _counted(monkeypatch, RotaryPositional, "cos_sin")
        checks = _mask_checks(monkeypatch)
        step = model(IDS[:, :1], torch.cat([MASK, MASK[:, :1]], 1), kv_caches=caches).logits
        full = model(torch.cat([IDS, IDS[:, :1]], 1), torch.cat([MASK, MASK[:, :1]], 1)).logits[:, -1:]
    assert len(tables) == 2 and len(checks) == 2  # one per forward: the step, then the full recomputation
    torch.testing.assert_close(step, full, atol=1e-5, rtol=0)


def test_kernel_masks_are_built_once_per_window_and_key_count():
    ctx = build_context(b=2, t=5, s=5, device="cpu", padding=MASK[:, 1:].bool(), is_causal=True)
    a = ctx.kernel_mask(None, 5)
    assert ctx.kernel_mask(None, 5) is a and a[1] is False  # global layers: padding AND causal, folded once
    assert a[0][1, 0].tolist() == (torch.ones(5, 5, dtype=torch.bool).tril() & MASK[1, 1:].bool()).tolist()
    assert torch.equal(ctx.key_mask(5), ctx.mask)  # without the causal rule (a fault that moves the diagonal)
    plain = build_context(b=2, t=5, s=5, device="cpu", is_causal=True)
    assert plain.kernel_mask(None, 5, causal_flag=True) == (None, True)  # no other mask: SDPA's fused causal path
    square, flag = plain.kernel_mask(None, 5)  # a kernel without the flag gets the causal mask, built once
    assert flag is False and square.shape == (1, 1, 5, 5) and plain.kernel_mask(None, 5)[0] is square
    assert square[0, 0].tolist() == torch.ones(5, 5, dtype=torch.bool).tril().tolist()
    band, flag = ctx.kernel_mask(2, 5)
    assert flag is False and band.shape == (2, 1, 5, 5)  # the band holds the causal rule
    assert ctx.kernel_mask(2, 5)[0] is band
    assert band[0, 0].sum(-1).tolist() == [1, 2, 2, 2, 2]


def _plan_calls(model, *args, **kwargs) -> Counter:
    """The mask and position work one forward does: every call of a function of masks.py, shapes.py (the checks)
    and context.py, except the context's two per-layer lookups (``kernel_mask``, ``table``: memoised, their work
    is the masks.py calls they make on a miss) and the norms' ``compute_dtype`` (not mask work)."""
    watched = {str(Path(m.__file__)) for m in (masks, context, shapes)}
    seen: Counter = Counter()

    def profile(frame, event, arg):
        code = frame.f_code
        if (
            event == "call"
            and code.co_filename in watched
            and code.co_name not in ("kernel_mask", "table", "compute_dtype")
        ):
            seen[code.co_name] += 1

    sys.setprofile(profile)
    try:
        with torch.no_grad():
            model(*args, **kwargs)
    finally:
        sys.setprofile(None)
    return seen


@pytest.mark.parametrize("kernel", ["sdpa", "math"])
@pytest.mark.parametrize("padded", [False, True], ids=["no-padding", "padding"])
@pytest.mark.parametrize("kind", ["causal", "window", "cache", "encoder"])
def test_mask_and_position_work_does_not_grow_with_the_layers(kind, padded, kernel):
    """The number of mask/position computations per forward is the same for 1 and 4 layers."""
    counts = []
    for n_layers in (1, 4):
        arch = "encoder" if kind == "encoder" else "decoder_lm"
        extra = {"sliding_window": 3} if kind == "window" else {}
        model = _model(arch, n_layers, positional="rope" if arch == "decoder_lm" else "learned", kernel=kernel, **extra)
        mask = MASK if padded else torch.ones_like(MASK)
        if kind == "cache":
            caches = model.new_caches()
            with torch.no_grad():
                model(IDS[:, :4], mask[:, :4], kv_caches=caches)
            counts.append(_plan_calls(model, IDS[:, 4:], mask, kv_caches=caches))
        else:
            counts.append(_plan_calls(model, IDS, mask))
    assert counts[0] == counts[1], f"1 layer: {dict(counts[0])}; 4 layers: {dict(counts[1])}"
    assert counts[0]["build_context"] == 1 and counts[0]["query_positions"] == 1
    if kind != "encoder":
        assert counts[0]["cache_seen"] == 1  # the caches are read once, by the stack's context
    assert counts[0]["hf_padding"] == 1  # the HF mask is checked once, by the context
    if kind in ("causal", "cache") and not padded and kernel == "sdpa":
        assert counts[0]["causal_mask"] == (0 if kind == "causal" else 1)  # SDPA's flag when T == S


def test_a_plain_causal_forward_hands_sdpa_the_flag_and_math_one_causal_mask(monkeypatch):
    """No padding and T == S: SDPA's fused causal path (no mask built); the math kernel gets one causal mask,
    built once for the four layers."""
    for kernel, built in (("sdpa", 0), ("math", 1)):
        model = _model("decoder_lm", 4, kernel=kernel)
        calls = _counted(monkeypatch, context, "causal_mask")
        with torch.no_grad():
            model(IDS, torch.ones_like(MASK))
        assert len(calls) == built, kernel
