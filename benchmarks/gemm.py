"""The machine's matmul peak, measured: the denominator of MFU in benchmarks/train_step.py.

    python benchmarks/gemm.py [--threads 2] [--size 2048]

Square ``n x n @ n x n`` matmuls (2·n³ FLOPs each), best of several, in float32 and (CPU AVX-512 BF16 / CUDA)
bfloat16. Run by hand on a quiet machine; a busy one under-reports the peak.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from _common import environment, timed  # noqa: E402


def peak_flops(dtype: torch.dtype = torch.float32, size: int = 2048, repeat: int = 5) -> float:
    """Best FLOP/s of an ``size``-square matmul in ``dtype`` on the CPU."""
    a = torch.randn(size, size).to(dtype)
    b = torch.randn(size, size).to(dtype)
    torch.mm(a, b)  # warm-up
    return 2 * size**3 / timed(lambda: torch.mm(a, b), repeat)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--size", type=int, default=2048)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(environment())
    for dtype in (torch.float32, torch.bfloat16):
        gflops = peak_flops(dtype, args.size) / 1e9
        print(f"{str(dtype).removeprefix('torch.'):>9s}  {args.size}^3 matmul  {gflops:8.1f} GFLOP/s")


if __name__ == "__main__":
    main()
