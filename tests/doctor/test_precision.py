"""Float islands (anatomy/doctor/precision.py): the dtypes a forward computed in set the tolerance floor, an op that
fails on mixed float dtypes is rerun in float64, the forward runs with float64 as the default dtype."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from anatomy.doctor import check
from anatomy.doctor.contract.precision import Islands, floor_for, islands, tol, tolerating

REAL = Path(__file__).parent / "zoo" / "real"


def test_floor_follows_the_narrowest_dtype_seen():
    assert floor_for({torch.float64}) == 0.0
    assert floor_for({torch.float64, torch.float32}) == pytest.approx(300 * 1.1920929e-07)
    assert floor_for({torch.float16}) > floor_for({torch.float32})
    with tolerating(1e-5):
        assert tol(1e-9) == 1e-5 and tol(1e-3) == 1e-3
    assert tol(1e-9) == 1e-9


def test_mixed_dtype_op_is_rerun_in_float64_and_the_island_is_seen():
    w = torch.randn(4, 4, dtype=torch.float64)
    x = torch.randn(2, 4, dtype=torch.float64)
    with pytest.raises(RuntimeError):
        F.linear(x.float(), w)
    with Islands() as mode:
        out = F.linear(x.float(), w)
    assert out.dtype == torch.float64 and mode.promoted == 1 and torch.float32 in mode.seen
    assert torch.allclose(out, F.linear(x.float().double(), w))


def test_an_op_without_a_float64_kernel_runs_in_float32_and_the_island_is_seen():
    """torch._grouped_mm (transformers' mixture-of-experts layers) refuses float64: run in float32, put back."""
    a = torch.randn(6, 4, dtype=torch.float64)
    b = torch.randn(2, 4, 4, dtype=torch.float64)
    offs = torch.tensor([2, 6], dtype=torch.int32)
    with pytest.raises(RuntimeError, match="got Double"):
        torch._grouped_mm(a, b, offs=offs)
    with Islands() as mode:
        out = torch._grouped_mm(a, b, offs=offs)
    assert out.dtype == torch.float64 and mode.narrowed == 1 and torch.float32 in mode.seen
    ref = torch.cat([a[:2] @ b[0], a[2:] @ b[1]])
    assert torch.allclose(out, ref, rtol=1e-5, atol=1e-5 * float(ref.abs().max()))


def test_the_forward_runs_with_its_inputs_dtype_as_default():
    before = torch.get_default_dtype()
    with islands(torch.float64):
        assert torch.full((2,), torch.finfo(torch.float64).min).dtype == torch.float64
    assert torch.get_default_dtype() == before


@pytest.mark.parametrize(
    "target, kw",
    [
        ("speech.py:WhisperBlock", {}),
        ("speech.py:WhisperAttention", {}),
        ("llm.py:LlamaAttention", {"causal": True}),
        ("llm_zh.py:QwenStyleAttention", {}),
    ],
)
def test_modules_computing_in_float32_pass_with_the_floor_in_the_report(target, kw):
    report = check(str(REAL / target), **kw)
    assert report.errors == [], report.render()
    assert "float32" in report.settings["computed_in"] and report.settings["tolerance_floor"] > 0
    assert any("float32" in n["en"] for n in report.found["call_notes"])


def test_whisper_layernorm_cast_is_rerun_not_a_crash():
    report = check(str(REAL / "speech.py:WhisperBlock"))
    assert any("rerun in float64" in n["en"] for n in report.found["call_notes"])
    assert report.diagnosis["status"] == "matches", report.render()


def test_rope_tables_in_float32_are_read_as_relative_positions():
    report = check(str(REAL / "llm_zh.py:QwenStyleAttention"))
    assert report.diagnosis["status"] == "matches" and "RoPE" in str(report.diagnosis["variant"]), report.render()
