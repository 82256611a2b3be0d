"""Attention benchmark: our kernels against raw projections + SDPA and nn.MultiheadAttention.

    GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=68719476736 \
        python benchmarks/attention.py [--seq 128 512 1024 2048] [--rounds 5] [--threads 2]

B=4, H=8, Dh=64 (D=512), float32. For each T and each mask setting (causal; key padding with lengths
T, 3T/4, T/2, T/4) it prints forward and forward+backward time as the median ratio to raw SDPA over interleaved
rounds, and peak memory of one forward+backward. Run by hand; numbers go in the closing note, never in tests.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).parent))
from _common import environment, peak_memory, rounds  # noqa: E402

from anatomy.bench.suites import RawSDPA  # noqa: E402 - the floor: 4 Linears + one SDPA call
from anatomy.components import MultiHeadAttention  # noqa: E402
from anatomy.components.inputs import attention_inputs
from anatomy.components.masks import key_padding_to_attention, padding_mask, to_torch_nn  # noqa: E402

B, H, DH = 4, 8, 64
D = H * DH


def contenders(t: int, setting: str, backward: bool, skip_loop: bool):
    torch.manual_seed(0)
    x = torch.randn(B, t, D, requires_grad=backward)
    keep = padding_mask(torch.tensor([t, 3 * t // 4, t // 2, t // 4]), t)  # (B, S)
    causal = setting == "causal"
    ours_mask = None if causal else key_padding_to_attention(keep)  # (B, 1, 1, S)
    raw = RawSDPA(D, H)
    mha = nn.MultiheadAttention(D, H, batch_first=True)
    tri = torch.ones(t, t, dtype=torch.bool).tril()

    def run(fn):
        def go():
            if backward:
                fn().sum().backward()
            else:
                with torch.no_grad():
                    fn()

        return go

    fns = {"raw sdpa": run(lambda: raw(x, ours_mask, causal))}
    for kernel in ("auto", "sdpa", "math", "loop"):
        if kernel == "loop" and skip_loop:
            continue
        m = MultiHeadAttention(d_model=D, n_heads=H, kernel=kernel)
        fns[f"ours {kernel}"] = run(lambda m=m: m(x, ctx=attention_inputs(m, x, mask=ours_mask, is_causal=causal))[0])

    def torch_mha(need: bool):
        if causal:
            return mha(x, x, x, attn_mask=to_torch_nn(tri), is_causal=True, need_weights=need)[0]
        return mha(x, x, x, key_padding_mask=to_torch_nn(keep), need_weights=need)[0]

    for need in (False, True):
        fns[f"nn.MHA weights={need}"] = run(lambda need=need: torch_mha(need))
    return fns


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seq", type=int, nargs="+", default=[128, 512, 1024, 2048])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    print(f"attention benchmark · B={B} H={H} Dh={DH} D={D} float32 · {environment()}")
    for t in args.seq:
        for setting in ("causal", "padded"):
            fwd = contenders(t, setting, backward=False, skip_loop=False)
            bwd = contenders(t, setting, backward=True, skip_loop=t > 1024)
            n = args.rounds if t <= 1024 else max(3, args.rounds // 2)
            f_times, f_ratio = rounds(fwd, "raw sdpa", n, args.repeat)
            b_times, b_ratio = rounds(bwd, "raw sdpa", n, args.repeat)
            mem = {name: peak_memory(fn) for name, fn in bwd.items()}
            print(f"\nT={t} {setting}  (ratios: median over {n} rounds vs raw sdpa; memory: peak of fwd+bwd)")
            print(f"  {'contender':<22}{'fwd ms':>9}{'fwd ×':>8}{'fwd+bwd ms':>12}{'f+b ×':>8}{'peak MiB':>10}")
            for name in fwd:
                bt = f"{b_times[name] * 1e3:12.1f}{b_ratio[name]:8.2f}" if name in bwd else f"{'—':>12}{'—':>8}"
                mm = f"{mem[name] / 2**20:10.1f}" if name in mem else f"{'—':>10}"
                print(f"  {name:<22}{f_times[name] * 1e3:9.2f}{f_ratio[name]:8.2f}{bt}{mm}")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
