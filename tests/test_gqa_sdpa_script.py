"""benchmarks/gqa_sdpa.py runs on the CPU at its quick size: every contender (grouped, repeated, ours) agrees with
the grouped call on the rows that see a key, and each row names the backend that ran."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gqa_sdpa.py"


def test_quick_cpu_run(capsys):
    saved = list(sys.path)
    try:
        spec = importlib.util.spec_from_file_location("gqa_sdpa", SCRIPT)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        assert module.main(["--device", "cpu", "--quick", "--rounds", "1"]) == 0
    finally:
        sys.path[:] = saved
    rows = [line.split() for line in capsys.readouterr().out.splitlines()[2:]]
    assert len(rows) == 2 * 2 * 3  # dtypes x masks x contenders
    assert {r[6] for r in rows} == {"native", "repeat", "anatomy"}
    assert all(r[7] != "" and float(r[-1]) < 1e-2 for r in rows)
