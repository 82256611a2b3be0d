"""benchmarks/gpu_train_check.py (the command-line path on a GPU: train fp32/bf16/fp16/compile, SIGKILL +
--resume, generate) runs end to end on the CPU at its quick size (without the compile and fp16 runs), every check
passing, and writes its JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_train_check.py"


def test_quick_cpu_run(tmp_path):
    out = tmp_path / "train.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--quick",
            "--skip-compile",
            "--skip-fp16",
            "--out",
            str(out),
            "--work",
            str(tmp_path / "w"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    data = json.loads(out.read_text())
    assert [c["name"] for c in data["checks"]] == [
        "char-shakespeare fp32 val loss",
        "char-shakespeare bf16 val loss",
        "SIGKILL after the middle checkpoint, then --resume",
        "anatomy generate from the checkpoint",
    ]
    # compile=true and fp16 are tested in tests/training (on a CPU the compile and emulated fp16 are slow here)
    assert all(c["passed"] for c in data["checks"])
    assert "bit-identical True" in data["checks"][2]["detail"]  # on the CPU the resumed losses are exact
