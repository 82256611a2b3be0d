"""Block faults switched on in one sub-layer of the reference, and the doctor's own norm_on_query_only."""

from __future__ import annotations

import pytest
import torch

from anatomy.components.block import EncoderBlock
from anatomy.doctor.diagnosis.sublayer import block_fault_keys, inject, severity, split

X = torch.randn(2, 5, 8, generator=torch.Generator().manual_seed(0), dtype=torch.float64)


def block(placement="pre"):
    torch.manual_seed(0)
    return EncoderBlock.build(d_model=8, n_heads=2, d_ff=16, placement=placement, kernel="math").double().eval()


def out(ref):
    with torch.no_grad():
        return ref(X)[0]


def test_a_fault_in_one_sub_layer_changes_that_sub_layer_only():
    ref = block()
    base = out(ref)
    with inject(ref, "no_residual@attn"):
        attn_only = out(ref)
        assert "after" in vars(ref.attn_add_norm)  # shadowed on that AddNorm only
        assert "after" not in vars(ref.ffn_add_norm)
    with inject(ref, "no_residual"):
        both = out(ref)
    assert not torch.allclose(attn_only, base) and not torch.allclose(attn_only, both)
    assert torch.equal(out(ref), base)  # undone on exit


def test_norm_on_query_only_feeds_keys_and_values_the_raw_stream():
    ref = block()
    base = out(ref)
    with inject(ref, "norm_on_query_only"):
        changed = out(ref)
    assert float((changed - base).abs().max()) > 1e-3 and torch.equal(out(ref), base)
    with pytest.raises(ValueError, match="Pre-Norm"):
        with inject(block("post"), "norm_on_query_only"):
            pass


def test_keys_and_severities():
    assert split("norm_on_residual_path@ffn") == ("norm_on_residual_path", "ffn") and split("no_scaling")[1] is None
    assert set(block_fault_keys()) >= {"no_residual@attn", "no_residual@ffn", "norm_on_query_only"}
    assert severity("norm_on_query_only") == "error" and severity("finite_mask_fill") == "warning"
