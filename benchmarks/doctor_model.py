"""How long `anatomy check my_gpt.py:GPT` takes on a 6-layer model (target: at most 10 s on 2 cores).

    python benchmarks/doctor_model.py            # a correct nanoGPT-style model and one with a mask sliced wrongly
    python benchmarks/doctor_model.py --runs 3   # the median of 3 runs each

The models are tests/doctor/model/nano_style.py (a correct one) and the same file with its causal mask buffer
sliced wrongly (every layer leaks below block_size: the block doctor's differential diagnosis runs on a faulty
block, the slow path). Each check runs in this process, one intra-op thread (as the doctor sets it), 6 layers.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from anatomy.doctor import check  # noqa: E402

NANO = ROOT / "tests" / "doctor" / "model" / "nano_style.py"
SLICED = ("self.bias[:, :, :T, :T] == 0", "self.bias[:, :, -T:, :T] == 0")


def _time(target: str, layers: int, runs: int) -> tuple[float, set[str]]:
    times, faults = [], set()
    for _ in range(runs):
        start = time.perf_counter()
        report = check(target, n_layers=layers)
        times.append(time.perf_counter() - start)
        faults = report.faults
    return statistics.median(times), faults


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--layers", type=int, default=6)
    args = parser.parse_args()
    check(f"{NANO}:GPT", n_layers=1)  # warm-up: imports, first-call costs
    with tempfile.TemporaryDirectory() as tmp:
        sliced = Path(tmp) / "sliced.py"
        sliced.write_text(NANO.read_text().replace(*SLICED))
        for name, target in (("correct", f"{NANO}:GPT"), ("mask sliced wrongly", f"{sliced}:GPT")):
            seconds, faults = _time(target, args.layers, args.runs)
            print(f"{name:>20}: {seconds:6.2f} s for {args.layers} layers  faults={sorted(faults)}")


if __name__ == "__main__":
    main()
