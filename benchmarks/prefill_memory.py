"""Peak memory of a generation prefill with every position's logits and with only the last one's.

    python benchmarks/prefill_memory.py [--prompt 1000] [--vocab 151936] [--d-model 64] [--threads 2]

A Qwen3-design LM with Qwen's vocabulary (151,936 tokens) and a tiny body (2 layers, d 64, 4 query / 2 kv heads of
16, d_ff 128) so the LM head dominates, batch 1, one ``--prompt``-token prompt, fed with a cache as the prefill of
``generate`` feeds it. Contenders:

``full``        ``model(ids, kv_caches=..., use_cache=True, logits_to_keep=0).logits[:, -1]``: every position's
                logits (B, T, V) made and only the last row read (the prefill before ``logits_to_keep``)
``kept``        the same call with ``logits_to_keep=1``: the head runs on the last position only
``generate``    ``CachedDecoding(...).prefill()``, what ``anatomy.generation.generate`` runs now (it must equal
                ``kept``)

Two measures, each contender in a fresh subprocess (nothing freed earlier is reused):

``torch peak``  the peak of the bytes torch allocates on the CPU during the call, from the profiler's allocation
                events (``anatomy.bench.timing.peak_memory``)
``RSS peak``    the process's peak resident set during the call above its resident set just before (Linux: the
                high-water mark ``VmHWM`` of /proc/self/status, reset through /proc/self/clear_refs first)

Prints each contender's peaks in MB, the theoretical size of the full logits (T x V float32), and the ratio
full / kept (issue 28 asks for at least 5x).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from _common import environment, peak_memory  # noqa: E402

from anatomy import ModelConfig, build_model  # noqa: E402
from anatomy.generation.decoding import CachedDecoding  # noqa: E402

CONTENDERS = ("full", "kept", "generate")


def _kib(field: str) -> int | None:
    """A ``kB`` field of /proc/self/status, in bytes (None off Linux)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _rss_peak(fn) -> int | None:
    """Peak resident bytes during ``fn()`` above the resident bytes before it (Linux only)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to the current RSS
    except OSError:
        return None
    before = _kib("VmRSS")
    fn()
    peak = _kib("VmHWM")
    return None if before is None or peak is None else peak - before


def one(args: argparse.Namespace) -> dict:
    """Measure contender ``args.one`` in this process."""
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    config = ModelConfig.from_preset(
        "qwen3",
        vocab_size=args.vocab,
        d_model=args.d_model,
        n_heads=4,
        n_kv_heads=2,
        head_dim=args.d_model // 4,
        n_layers=2,
        d_ff=2 * args.d_model,
        max_seq_len=args.prompt + 8,
    )
    model = build_model(config).eval()
    ids = torch.randint(0, args.vocab, (1, args.prompt), generator=torch.Generator().manual_seed(0))

    def call() -> torch.Tensor:
        with torch.no_grad():
            if args.one == "generate":
                return CachedDecoding(model, ids, None, 1).prefill()
            keep = 0 if args.one == "full" else 1
            caches = model.new_caches(capacity=args.prompt + 1)
            out: torch.Tensor = model(ids, kv_caches=caches, use_cache=True, logits_to_keep=keep).logits[:, -1]
            return out

    last = call()  # warm-up: libraries loaded, kernels chosen
    torch_peak = peak_memory(call)
    rss = _rss_peak(call)
    return {"torch": torch_peak, "rss": rss, "sum": float(last.double().sum())}


def _run(args: argparse.Namespace, name: str) -> dict:
    cmd = [sys.executable, __file__, "--one", name, "--prompt", str(args.prompt), "--vocab", str(args.vocab)]
    cmd += ["--d-model", str(args.d_model), "--threads", str(args.threads)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=True, env=os.environ.copy())
    result: dict = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _mb(n: int | None) -> str:
    return "n/a" if n is None else f"{n / 1e6:9.1f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompt", type=int, default=1000)
    parser.add_argument("--vocab", type=int, default=151936)
    parser.add_argument("--d-model", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--one", choices=CONTENDERS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(one(args)))
        return 0
    print(environment())
    print(f"prompt {args.prompt} tokens, vocab {args.vocab}, d_model {args.d_model}, batch 1, float32")
    print(f"full logits T x V x 4 bytes = {args.prompt * args.vocab * 4 / 1e6:.1f} MB")
    results = {name: _run(args, name) for name in CONTENDERS}
    print(f"{'contender':<10} {'torch peak MB':>14} {'RSS peak MB':>12}")
    for name, r in results.items():
        print(f"{name:<10} {_mb(r['torch']):>14} {_mb(r['rss']):>12}")
    sums = {r["sum"] for r in results.values()}
    if max(sums) - min(sums) > 1e-3 * max(1.0, max(abs(s) for s in sums)):
        print(f"the contenders' last-position logits differ: {sorted(sums)}")
        return 1
    for measure in ("torch", "rss"):
        full, kept = results["full"][measure], results["kept"][measure]
        if full is not None and kept:
            print(f"{measure} peak: full / kept = {full / kept:.1f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
