"""benchmarks/gpu_train_check.py (the command-line path on a GPU: train fp32/bf16/compile, SIGKILL + --resume,
generate) runs end to end on the CPU at its quick size, every check passing, and writes its JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_train_check.py"


def test_quick_cpu_run(tmp_path):
    out = tmp_path / "train.json"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--out", str(out), "--work", str(tmp_path / "w")],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    data = json.loads(out.read_text())
    assert [c["name"] for c in data["checks"]] == [
        "char-shakespeare fp32 val loss", "char-shakespeare bf16 val loss", "char-shakespeare fp16 val loss",
        "fp16 loss scaling", "SIGKILL after the middle checkpoint, then --resume", "compile=true trains like eager",
        "anatomy generate from the checkpoint"]
    assert all(c["passed"] for c in data["checks"])
    assert "bit-identical True" in data["checks"][4]["detail"]  # on the CPU the resumed losses are exact
