"""Greedy decoding speed: our KV-cache ``anatomy.generation.generate`` against Hugging Face GPT-2 ``generate``
(its own KV cache) at the same size and weights-shape, in one run.

    GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=68719476736 \
        python benchmarks/decode.py [--rounds 11] [--repeat 3] [--threads 2] [--new 200] [--d-model 256] [--vocab 4096]

Batch 1, a 16-token prompt, ``--new`` new tokens (no EOS: every run emits exactly that many), 4 layers, 4 heads,
d 256, vocab 4096, context 256 (``--d-model 128 --vocab 65``: the char-shakespeare model). Prints new tokens/s
(best of ``--repeat`` per round) and the median ratio over interleaved rounds.

At d 256 a step reads 16.8 MB of float32 weights, more than this VM's share of the L3 cache, so batch-1 decoding
is bound by memory traffic as much as by Python: the per-token time splits into the weights' reads (the same for
every implementation) and the per-step overhead (where the implementations differ). ``ours`` decodes
with the flattened step (anatomy.generation.fast), ``ours_modules`` with ``fast=False`` (every module called);
both give the same tokens (asserted here). ``weights_alone`` is the floor every implementation pays: each Linear of
our model applied once to one token's vector, ``--new`` times, nothing else (when it is most of ``ours``' time the
machine's memory bandwidth, not the code, sets the ratios).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from _common import environment, rounds  # noqa: E402

from anatomy.bench.peers import LMSize, hf_gpt2, ours_lm, peer_status  # noqa: E402
from anatomy.generation import generate  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--new", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--vocab", type=int, default=4096)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(environment())
    torch.manual_seed(0)
    prompt = torch.randint(0, args.vocab, (1, 16), generator=torch.Generator().manual_seed(0))
    size = LMSize(n_layers=4, n_heads=4, d_model=args.d_model, seq=256, batch=1, vocab=args.vocab)
    mine = ours_lm(size).eval()
    contenders = {
        "ours": lambda: generate(mine, prompt, max_new_tokens=args.new),
        "ours_modules": lambda: generate(mine, prompt, max_new_tokens=args.new, fast=False),
    }
    linears = [
        (m.weight, m.bias, torch.zeros(1, m.in_features)) for m in mine.modules() if isinstance(m, torch.nn.Linear)
    ]

    def weights_alone() -> torch.Tensor:
        for _ in range(args.new):
            for w, b, x in linears:
                out = torch.nn.functional.linear(x, w, b)
        return out

    if peer_status()["transformers"]["installed"]:
        torch.manual_seed(0)
        hf = hf_gpt2(size).eval()
        mask = torch.ones_like(prompt)
        contenders["hf_gpt2_generate"] = lambda: hf.generate(
            prompt,
            attention_mask=mask,
            max_new_tokens=args.new,
            min_new_tokens=args.new,
            do_sample=False,
            pad_token_id=0,
            eos_token_id=None,
        )
        with torch.no_grad():
            assert contenders["hf_gpt2_generate"]().shape[1] == 16 + args.new
    assert contenders["ours"]().shape[1] == 16 + args.new
    assert torch.equal(contenders["ours"](), contenders["ours_modules"]())
    contenders["weights_alone"] = weights_alone
    with torch.inference_mode():
        seconds, ratios = rounds(contenders, "ours", args.rounds, args.repeat)
    print(
        f"greedy, batch 1, prompt 16, {args.new} new tokens, d {args.d_model}, vocab {args.vocab}: "
        f"median over {args.rounds} interleaved rounds (best of {args.repeat} each)"
    )
    for k in contenders:
        print(f"  {k:18s} {args.new / seconds[k]:8.1f} new tokens/s   time / ours {ratios[k]:5.2f}")


if __name__ == "__main__":
    main()
