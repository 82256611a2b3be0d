"""Greedy decoding speed against the weight-read floor: our ``generate`` compiled and eager, the compiled step alone,
and Hugging Face GPT-2 ``generate`` (its own KV cache) at the same size, in one run.

    GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=68719476736 \\
        python benchmarks/decode.py [--rounds 11] [--repeat 3] [--threads 2] [--new 200] [--d-model 256] [--vocab 4096]
        [--no-tiny] [--cpu-time]

Batch 1, a 16-token prompt, ``--new`` new tokens (no EOS: every run emits exactly that many), 4 layers, 4 heads,
d 256, vocab 4096, context 256 (``--d-model 128 --vocab 65``: the char-shakespeare model).

``weights_alone`` is the floor every implementation pays: each Linear of our model applied once to one token's
vector, ``--new`` times, nothing else (16.8 MB of float32 per token at d 256). Every contender's time is divided by
the floor's *in the same round*, and the report quotes the median of those per-round ratios with their min–max
(the ratio travels between machines; tokens/s do not). Contenders: ``ours`` (``generate(compile=True)``: the
compiled step on static caches, anatomy.generation.compiled), ``ours_step`` (the compiled step alone, ``--new``
calls, no sampling loop), ``ours_step_1thread`` (the same with torch's threads set to 1 around it, against the
floor on ``--threads``: on a busy machine the attention kernel's OpenMP fork and join per layer, not the work,
decides the step's time, docs/performance.md), ``ours_eager`` (``compile=False``: the flat view,
anatomy.generation.fast), ``ours_modules`` (``fast=False, compile=False``: every module called),
``hf_gpt2_generate``. The compile warm-up (the first compiled call: tracing and code generation) is printed beside
them; it is paid once per model and shape in a process (a second ``generate`` reuses the graph).

``--cpu-time`` (with ``--threads 1``): every call timed in process CPU time instead of wall-clock time, so a
thread descheduled by a busy machine's other processes does not count (docs/performance.md, rounds 6 and 7; the
same interleaved rounds). The line ``the loop around the step`` is ``ours - ours_step`` per round over the floor:
``generate``'s own cost (options, prefill, the first step through dynamo, the sampling loop), apart from the step.

Then the short case ``compile="auto"`` must not slow: ``--tiny-new`` (20) tokens from a tiny model (2 layers, d 32,
vocab 64), where compiling never pays: ``auto`` (the default) against ``compile=False``, interleaved the same way.
All three decoders give the same tokens (asserted here).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).parent))
from _common import environment  # noqa: E402

from anatomy.bench.peers import LMSize, hf_gpt2, ours_lm, peer_status  # noqa: E402
from anatomy.bench.timing import load_average, round_times  # noqa: E402
from anatomy.generation import compiled, generate  # noqa: E402
from anatomy.generation.decoding import CachedDecoding  # noqa: E402


def _table(times: dict[str, list[float]], reference: str, new: int) -> None:
    ref = times[reference]
    for name, v in times.items():
        per_round = sorted(a / b for a, b in zip(v, ref))
        print(
            f"  {name:18s} {new / statistics.median(v):9.1f} new tokens/s   time / {reference} "
            f"{statistics.median(per_round):5.2f}  [{per_round[0]:.2f}–{per_round[-1]:.2f}]"
        )


def cpu_round_times(contenders: dict[str, Callable[[], object]], n_rounds: int, repeat: int) -> dict[str, list[float]]:
    """``round_times`` (the same rotating order, one warm-up call each, best of ``repeat``) in process CPU time."""
    names = list(contenders)
    times: dict[str, list[float]] = {n: [] for n in names}
    for fn in contenders.values():
        fn()
    for r in range(n_rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            best = float("inf")
            for _ in range(repeat):
                start = time.process_time()
                contenders[name]()
                best = min(best, time.process_time() - start)
            times[name].append(best)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--new", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--vocab", type=int, default=4096)
    parser.add_argument("--tiny-new", type=int, default=20)
    parser.add_argument("--no-tiny", action="store_true", help="skip the 20-token tiny-model check")
    parser.add_argument("--cpu-time", action="store_true", help="time in process CPU time (with --threads 1)")
    args = parser.parse_args()
    if args.cpu_time and args.threads != 1:
        parser.error("--cpu-time needs --threads 1 (process CPU time adds up every thread's)")
    if args.threads:
        torch.set_num_threads(args.threads)
    print(environment())
    print(f"load average at the start: {load_average()}")
    torch.manual_seed(0)
    prompt = torch.randint(0, args.vocab, (1, 16), generator=torch.Generator().manual_seed(0))
    size = LMSize(n_layers=4, n_heads=4, d_model=args.d_model, seq=256, batch=1, vocab=args.vocab)
    mine = ours_lm(size).eval()
    new = args.new

    with torch.inference_mode():
        eager = generate(mine, prompt, max_new_tokens=new, compile=False)
        before = compiled.STATS.compilations
        got = generate(mine, prompt, max_new_tokens=new, compile=True)  # the warm-up: compiles the step
        if compiled.STATS.compilations == before:
            sys.exit("the decode step did not compile here (see the warning above)")
        warm_up = compiled.STATS.seconds[-1]
        print(f"compile warm-up (first compiled call, once per model and shape): {warm_up:.1f} s", flush=True)
        assert torch.equal(got, eager), "compiled and eager decoding disagree"
        assert torch.equal(generate(mine, prompt, max_new_tokens=new, fast=False, compile=False), eager)
        run = CachedDecoding(mine, prompt, None, new, compile=True)
        first = run.prefill().argmax(-1)
        run.step(first)  # the static caches, reusing the compiled graph
        assert run.static is not None
        static = run.static
        cursors = [(c.cursor, int(c.cursor)) for c in static.caches]
        ids = first[:, None]

        def step_alone() -> torch.Tensor:
            for cursor, start in cursors:
                cursor.fill_(start)
            for _ in range(new):
                out = static.step(ids)
            assert out is not None
            return out

        linears = [
            (m.weight, m.bias, torch.zeros(1, m.in_features)) for m in mine.modules() if isinstance(m, torch.nn.Linear)
        ]

        def weights_alone() -> torch.Tensor:
            for _ in range(new):
                for w, b, x in linears:
                    out = torch.nn.functional.linear(x, w, b)
            return out

        def step_one_thread() -> torch.Tensor:
            threads = torch.get_num_threads()
            torch.set_num_threads(1)
            try:
                return step_alone()
            finally:
                torch.set_num_threads(threads)

        contenders = {
            "weights_alone": weights_alone,
            "ours": lambda: generate(mine, prompt, max_new_tokens=new, compile=True),
            "ours_step": step_alone,
            "ours_step_1thread": step_one_thread,
            "ours_eager": lambda: generate(mine, prompt, max_new_tokens=new, compile=False),
            "ours_modules": lambda: generate(mine, prompt, max_new_tokens=new, fast=False, compile=False),
        }
    if peer_status()["transformers"]["installed"]:
        torch.manual_seed(0)
        hf: Any = hf_gpt2(size).eval()  # a transformers GPT2LMHeadModel (generate, config)
        mask = torch.ones_like(prompt)
        contenders["hf_gpt2_generate"] = lambda: hf.generate(
            prompt,
            attention_mask=mask,
            max_new_tokens=new,
            min_new_tokens=new,
            do_sample=False,
            pad_token_id=0,
            eos_token_id=None,
        )
        with torch.no_grad():
            assert contenders["hf_gpt2_generate"]().shape[1] == 16 + new
    with torch.inference_mode():
        if args.cpu_time:
            times = cpu_round_times(contenders, args.rounds, args.repeat)
        else:
            times = round_times(contenders, "weights_alone", args.rounds, args.repeat)
    print(
        f"greedy, batch 1, prompt 16, {new} new tokens, d {args.d_model}, vocab {args.vocab}, "
        f"{torch.get_num_threads()} threads, {'process CPU' if args.cpu_time else 'wall-clock'} time: median over "
        f"{args.rounds} interleaved rounds (best of {args.repeat} each) of the per-round time ratios [min–max]"
    )
    _table(times, "weights_alone", new)
    loop = sorted((a - b) / c for a, b, c in zip(times["ours"], times["ours_step"], times["weights_alone"]))
    per_token = statistics.median(a - b for a, b in zip(times["ours"], times["ours_step"])) / new
    print(
        f"  the loop around the step (ours - ours_step): {per_token * 1e6:.1f} µs a token, "
        f"{statistics.median(loop):.2f} [{loop[0]:.2f}–{loop[-1]:.2f}] × the floor"
    )
    if "hf_gpt2_generate" in times:
        hf_over = sorted(a / b for a, b in zip(times["hf_gpt2_generate"], times["ours"]))
        print(f"  HF generate time / ours: {statistics.median(hf_over):.2f} [{hf_over[0]:.2f}–{hf_over[-1]:.2f}]")
    print(f"  compile warm-up (first compiled call, once per model and shape): {warm_up:.1f} s")
    if "hf_gpt2_generate" in times:
        print(f"  tokens: compiled = eager = modules (asserted); HF peer: {hf.config.n_layer} layers, same sizes")
    print(f"load average at the end: {load_average()}")

    if args.no_tiny:
        return
    torch.manual_seed(0)
    tiny = ours_lm(LMSize(n_layers=2, n_heads=4, d_model=32, seq=64, batch=1, vocab=64)).eval()
    tiny_prompt = prompt[:, :8] % 64
    n = args.tiny_new
    before = compiled.STATS.compilations
    short = {
        "auto": lambda: generate(tiny, tiny_prompt, max_new_tokens=n),
        "compile_false": lambda: generate(tiny, tiny_prompt, max_new_tokens=n, compile=False),
    }
    assert torch.equal(short["auto"](), short["compile_false"]())
    with torch.inference_mode():
        if args.cpu_time:
            tiny_times = cpu_round_times(short, args.rounds, args.repeat)
        else:
            tiny_times = round_times(short, "compile_false", args.rounds, args.repeat)
    assert compiled.STATS.compilations == before, "compile='auto' compiled a 20-token generation"
    print(f"{n} new tokens, tiny model (2 layers, d 32, vocab 64), auto never compiles here:")
    _table(tiny_times, "compile_false", n)


if __name__ == "__main__":
    main()
