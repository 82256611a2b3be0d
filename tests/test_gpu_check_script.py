"""The prepared GPU check (benchmarks/gpu_check.py) runs end to end on the CPU: every correctness check it makes on a
GPU — kernels against a float32 reference in three dtypes, masked rows, forced SDPA backends, fast vs module
generation, bf16 autocast training — passes here at small sizes, and its JSON has the promised shape. The speed
sections (and everything CUDA-only) are for the device run; see the script's docstring."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_check.py"


def _load():
    saved = list(sys.path)
    try:
        spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path[:] = saved  # the script puts benchmarks/ and the repo root on the path for itself


def test_cpu_smoke_run_passes_every_check(tmp_path, capsys):
    out = tmp_path / "gpu.json"
    rc = _load().main(["--device", "cpu", "--quick", "--skip-speed", "--out", str(out)])
    data = json.loads(out.read_text())
    assert set(data) >= {"environment", "checks", "speed"}
    assert data["environment"]["torch"] and data["environment"]["device"] == "cpu"
    checks = data["checks"]
    failed = [c for c in checks if not c["passed"]]
    assert rc == 0 and not failed, failed
    assert all(set(c) >= {"name", "passed", "value", "tolerance"} for c in checks)
    for family in ("attn ", "masked attn ", "sdpa-backend MATH ", "generate ", "lm-bf16 "):
        assert any(c["name"].startswith(family) for c in checks), family
    for dtype in ("fp32", "bf16", "fp16"):
        for kernel in ("sdpa", "math", "loop"):
            assert any(c["name"] == f"attn causal+pad-gqa {dtype} {kernel} out" for c in checks)
    assert data["sdpa_dispatch"] and data["speed"] == []
    assert not [line for line in capsys.readouterr().out.splitlines() if line.startswith("FAIL")]


def test_missing_cuda_fails_fast(tmp_path, monkeypatch):
    module = _load()
    monkeypatch.setattr(module.torch.cuda, "is_available", lambda: False)
    out = tmp_path / "gpu.json"
    assert module.main(["--device", "cuda", "--out", str(out)]) == 2
    assert "CUDA is not available" in json.loads(out.read_text())["environment"]["error"]


def test_a_failed_check_exits_1(tmp_path, monkeypatch):
    module = _load()
    monkeypatch.setattr(module, "FP32_REL", 0.0)  # float32 sdpa vs math differ by round-off: now a failure
    out = tmp_path / "gpu.json"
    assert module.main(["--device", "cpu", "--quick", "--skip-speed", "--out", str(out)]) == 1
    failed = [c["name"] for c in json.loads(out.read_text())["checks"] if not c["passed"]]
    assert failed and all(" fp32 " in name for name in failed)


class _Warning:
    def __init__(self, message: str):
        self.message = message


def test_a_refused_backend_is_reported_with_its_own_reason():
    """PyTorch warns a header per backend, then that backend's reasons; the report keeps the forced backend's (the
    first H200 run printed the memory-efficient kernel's header as FLASH's reason)."""
    caught = [
        _Warning(m)
        for m in (
            "Memory efficient kernel not used because: (Triggered internally at sdp_utils.cpp:123.)",
            "Memory Efficient attention has been runtime disabled.",
            "Flash attention kernel not used because:",
            "Flash Attention does not support non-null attn_mask.",
            "cuDNN attention kernel not used because:",
            "Expected query, key and value to all be of dtype: {Half, BFloat16}.",
            "No available kernel. Aborting execution.",
        )
    ]
    reason = _load()._reason
    err = RuntimeError("No available kernel. Aborting execution.")
    assert reason(err, caught, "FLASH") == "Flash Attention does not support non-null attn_mask."
    assert reason(err, caught, "EFFICIENT") == "Memory Efficient attention has been runtime disabled."
    assert reason(err, caught, "CUDNN").startswith("Expected query, key and value")
    assert reason(err, [], "FLASH") == "No available kernel. Aborting execution."
