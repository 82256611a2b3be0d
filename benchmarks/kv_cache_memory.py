"""KV-cache memory and decode speed with and without a sliding window, in one run.

    GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=68719476736 \
        python benchmarks/kv_cache_memory.py [--new 2000] [--window 64] [--rounds 3] [--threads 2]

A Llama-design LM (4 layers, 4 query / 2 kv heads, d 256, RoPE, vocab 4096), batch 1, a 16-token prompt and
``--new`` greedy tokens. ``full`` attends to every earlier token and its cache grows with the sequence;
``window`` attends to the last W key slots and its cache rolls (Mistral's rolling buffer: it holds the last
W - 1 entries plus the new one). Prints the bytes the caches hold at the end and new tokens/s (median over
interleaved rounds).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from _common import environment, rounds  # noqa: E402

from anatomy import ModelConfig, build_model  # noqa: E402
from anatomy.generation.flat import flat  # noqa: E402


def model(window: int | None, length: int) -> torch.nn.Module:
    config = ModelConfig.from_preset(
        "llama",
        n_layers=4,
        n_heads=4,
        n_kv_heads=2,
        d_model=256,
        d_ff=688,
        vocab_size=4096,
        max_seq_len=length,
        sliding_window=window,
    )
    torch.manual_seed(0)
    return build_model(config).eval()


@torch.inference_mode()
def decode(m: torch.nn.Module, prompt: torch.Tensor, new: int) -> tuple[torch.Tensor, int]:
    """Greedy decoding written out (as ``generate`` does it) so the caches can be weighed at the end."""
    caches = m.new_caches(capacity=prompt.shape[1] + new)
    logits = m(prompt, kv_caches=caches, use_cache=True).logits[:, -1]
    step = flat(m)  # what generate's decode steps call
    out = []
    for _ in range(new):
        token = logits.argmax(-1)
        out.append(token)
        logits = step(token[:, None], None, kv_caches=caches, use_cache=True).logits[:, -1]  # (B, V)
    held = sum(buf.numel() * buf.element_size() for c in caches for buf in (c._k_buf, c._v_buf, c._pos_buf))
    return torch.stack(out, 1), held


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--new", type=int, default=2000)
    parser.add_argument("--window", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(environment())
    prompt = torch.randint(0, 4096, (1, 16), generator=torch.Generator().manual_seed(0))
    length = 16 + args.new
    models = {"full": model(None, length), f"window {args.window}": model(args.window, length)}
    held = {name: decode(m, prompt, args.new)[1] for name, m in models.items()}
    contenders = {name: (lambda m=m: decode(m, prompt, args.new)) for name, m in models.items()}
    seconds, ratios = rounds(contenders, "full", args.rounds, 1)
    print(
        f"batch 1, prompt 16, {args.new} new tokens, 4 layers, d 256, 2 kv heads of 64: "
        f"median over {args.rounds} interleaved rounds"
    )
    for name in models:
        print(
            f"  {name:12s} cache {held[name] / 2**20:8.2f} MiB   {args.new / seconds[name]:8.1f} new tokens/s"
            f"   time / full {ratios[name]:5.2f}"
        )


if __name__ == "__main__":
    main()
