"""How long `anatomy check my_gpt.py:GPT` takes on a 6-layer model (target: at most 10 s on 2 cores).

    python benchmarks/doctor_model.py            # every model below, once, in this process and as the command
    python benchmarks/doctor_model.py --runs 3   # the median of 3 runs each

The models: tests/doctor/model/nano_style.py (a correct nanoGPT-style GPT) and the same file with its causal mask
buffer sliced wrongly (every layer leaks below block_size: the block doctor's differential diagnosis runs on a
faulty block); from the real-model zoo (tests/doctor/zoo_models/), the book's Qwen3 (QK-norm on a gain called
`scale`, grouped-query attention, RoPE at base 10^6), its sliding-window GPT (a window of 4 in two of every three
layers), llm.c's Llama 3 (Llama 3.1's scaled RoPE, the FFN's gate called second), and the Qwen3 with a sigmoid in
place of the softmax (a block no reference matches: the diagnosis tries every single fault on every reference and
the 1,000 likeliest pairs, the slowest path there is). Each is checked with 6 layers: in this process (the doctor
sets one intra-op thread; the diagnosis splits its runs over two cores), and as a user runs it (`python -m anatomy
check ...`, a new process: imports and start-up included).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from anatomy.doctor import check  # noqa: E402

NANO = ROOT / "tests" / "doctor" / "model" / "nano_style.py"
ZOO = ROOT / "tests" / "doctor" / "zoo_models"
SLICED = ("self.bias[:, :, :T, :T] == 0", "self.bias[:, :, -T:, :T] == 0")
SIGMOID = (
    "weights = torch.softmax(scores / self.head_dim ** 0.5, dim=-1)",
    "weights = torch.sigmoid(scores / self.head_dim ** 0.5)",
)
SIX = """import sys
sys.path.insert(0, {zoo!r})
sys.path.insert(0, {tmp!r})
import rasbt_qwen3, rasbt_swa, qwen3_sigmoid


def qwen3():
    return rasbt_qwen3.Qwen3Model(rasbt_qwen3._tiny(n_layers=6))


def qwen3_sigmoid_attention():
    return qwen3_sigmoid.Qwen3Model(qwen3_sigmoid._tiny(n_layers=6))


def swa():
    return rasbt_swa.GPTModel({{**rasbt_swa._tiny_cfg(), "n_layers": 6}})
"""


def _cases(tmp: Path) -> list[tuple[str, str, str | None]]:
    sliced = tmp / "sliced.py"
    sliced.write_text(NANO.read_text().replace(*SLICED))
    sigmoid = (ZOO / "rasbt_qwen3.py").read_text()
    assert SIGMOID[0] in sigmoid
    (tmp / "qwen3_sigmoid.py").write_text(sigmoid.replace(*SIGMOID))
    six = tmp / "six_layers.py"
    six.write_text(SIX.format(zoo=str(ZOO), tmp=str(tmp)))
    return [
        ("nanoGPT style, correct", f"{NANO}:GPT", None),
        ("nanoGPT, mask sliced wrongly", f"{sliced}:GPT", None),
        ("Qwen3 (QK-norm, GQA)", f"{six}:qwen3", "qwen3"),
        ("sliding-window GPT", f"{six}:swa", "swa"),
        ("llm.c Llama 3", f"{ZOO / 'llmc_llama3.py'}:LLaMA", None),
        ("Qwen3, sigmoid attention", f"{six}:qwen3_sigmoid_attention", "qwen3_sigmoid_attention"),
    ]


def _in_process(target: str, factory: str | None, layers: int) -> tuple[float, str]:
    start = time.perf_counter()
    report = check(target, factory=factory) if factory else check(target, n_layers=layers)
    seconds = time.perf_counter() - start
    errors, warnings = report.counts()
    return seconds, f"{errors} errors, {warnings} warnings, faults={sorted(report.faults)}"


def _command(target: str, factory: str | None, layers: int) -> float:
    cmd = [sys.executable, "-m", "anatomy", "check", target]
    cmd += ["--factory", factory] if factory else ["--layers", str(layers)]
    start = time.perf_counter()
    subprocess.run(cmd, cwd=ROOT, capture_output=True, check=False)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--layers", type=int, default=6)
    args = parser.parse_args()
    check(f"{NANO}:GPT", n_layers=1)  # warm-up: imports, first-call costs
    with tempfile.TemporaryDirectory() as tmp:
        for name, target, factory in _cases(Path(tmp)):
            inside, said = [], ""
            for _ in range(args.runs):
                seconds, said = _in_process(target, factory, args.layers)
                inside.append(seconds)
            outside = [_command(target, factory, args.layers) for _ in range(args.runs)]
            print(
                f"{name:>30}: {statistics.median(inside):6.2f} s in process, {statistics.median(outside):6.2f} s "
                f"as the command ({args.layers} layers; {said})",
                flush=True,
            )


if __name__ == "__main__":
    main()
