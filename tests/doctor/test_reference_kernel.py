"""The reference attention kernel (``doctor/loading/kernels.py``): a float32 additive mask on float64 queries, which
PyTorch's fused CPU kernel gets wrong from T = 8 (baseline, AVX2) or T = 16 (AVX-512) keys on, is computed right,
on this CPU's kernels and on ATen's baseline ones (``ATEN_CPU_CAPABILITY=default``, another CPU's stand-in)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

from anatomy.doctor.loading.kernels import reference_kernels

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import json, torch, torch.nn.functional as F
from anatomy.doctor.loading.kernels import reference_kernels
torch.manual_seed(0)
q, k, v = (torch.randn(2, 2, 20, 8, dtype=torch.float64) for _ in range(3))
mask = torch.full((20, 20), torch.finfo(torch.float32).min, dtype=torch.float32).triu(1)
want = F.scaled_dot_product_attention(q, k, v, attn_mask=mask.double())
with reference_kernels():
    ours = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
scale = float(want.abs().max())
print(json.dumps({"ours": float((ours - want).abs().max()) / scale,
                  "capability": torch.backends.cpu.get_cpu_capability()}))
"""


def _run(capability: str | None) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    env.pop("ATEN_CPU_CAPABILITY", None)
    if capability is not None:
        env["ATEN_CPU_CAPABILITY"] = capability
    out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_float32_mask_on_float64_queries_is_computed_right_here():
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 20, 8, dtype=torch.float64) for _ in range(3))
    mask = torch.full((20, 20), float("-inf"), dtype=torch.float32).triu(1)
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=mask.double())
    with reference_kernels():
        got = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert float((got - want).abs().max()) <= 1e-12 * float(want.abs().max())


def test_and_on_the_baseline_kernels():
    """There the fused kernel is wrong from T = 8 on (torch 2.13): the reference kernel is not."""
    got = _run("default")
    assert got["capability"] == "DEFAULT"
    assert got["ours"] <= 1e-12
