"""Speed of the working tree against an earlier commit, in one run: train step, inference and greedy decoding.

    GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=68719476736 \
        python benchmarks/against_commit.py REV [--rounds 9] [--repeat 3] [--threads 2] [--new 200]

``REV`` is checked out with ``git worktree add --detach`` into a temporary directory (removed at the end;
``--old-path DIR`` uses a checkout you already have instead). Each contender of each tree runs in its own
subprocess with ``PYTHONPATH`` pointing at that tree, so the two versions never share a process: it builds the
model from a fixed seed, warms up, and then answers one round at a time (best of ``--repeat`` calls); the rounds
alternate between the two trees' subprocesses (the order flips every round), seconds apart, so a busy neighbour
slows both alike.

Contenders (the sizes of benchmarks/train_step.py and benchmarks/decode.py: GPT-2 design, 4 layers, 4 heads,
d 256, d_ff 1024, vocab 4096, no bias, no dropout, tied embeddings):

``train``       forward + loss + backward + AdamW (``torch.optim.AdamW(fused=True)``, the same in both trees: the
                model is what is compared), T 256, batch 8
``inference``   full-sequence forward without grad, T 256, batch 8
``decode``      ``anatomy.generation.generate``, batch 1, 16-token prompt, ``--new`` new tokens, greedy

Prints tokens/s of both trees and the median over rounds of the per-round ratio new / old (> 1: the working
tree is faster; issue 11 asks for >= 1 for train and inference), and, for the working tree, decoding against
Hugging Face GPT-2 ``generate`` in the same subprocess (issue 11: >= 2x).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
L, H, D, T, B, V = 4, 4, 256, 256, 8, 4096
PROMPT = 16


# ---------------------------------------------------------------------------------------------- the worker side
def _model(torch):
    from anatomy import ModelConfig, build_model

    torch.manual_seed(0)
    config = ModelConfig.from_preset(
        "gpt2",
        n_layers=L,
        n_heads=H,
        d_model=D,
        d_ff=4 * D,
        vocab_size=V,
        max_seq_len=T,
        dropout=0.0,
        attention_dropout=0.0,
        kernel="sdpa",
        bias=False,
    )
    return build_model(config)


def worker(what: str, repeat: int, new: int) -> None:
    """Build and warm up ``what`` in this process (the tree on PYTHONPATH), print where anatomy came from, then
    answer each line on stdin with one measurement: tokens/s, best of ``repeat`` calls."""
    import torch

    import anatomy

    model = _model(torch)
    out = {"anatomy": str(Path(anatomy.__file__).resolve().parents[1])}
    if what == "train":
        ids = torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(0))
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1, fused=True)

        def step():
            model(input_ids=ids, labels=ids).loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        fns, tokens = {"ours": step}, ids.numel()
    elif what == "inference":
        ids = torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(0))
        model.eval()

        def forward():
            with torch.no_grad():
                model(input_ids=ids)

        fns, tokens = {"ours": forward}, ids.numel()
    elif what == "decode":
        from anatomy.generation import generate

        model.eval()
        prompt = torch.randint(0, V, (1, PROMPT), generator=torch.Generator().manual_seed(0))
        fns, tokens = {"ours": lambda: generate(model, prompt, max_new_tokens=new)}, new
        hf = _hf_gpt2(torch)
        if hf is not None:
            mask = torch.ones_like(prompt)
            fns["hf_generate"] = lambda: hf.generate(
                prompt,
                attention_mask=mask,
                max_new_tokens=new,
                min_new_tokens=new,
                do_sample=False,
                pad_token_id=0,
                eos_token_id=None,
            )
    else:
        raise ValueError(f"unknown contender {what!r}")
    with torch.inference_mode(what != "train"):
        for fn in fns.values():  # warm-up
            fn()
            fn()
        print(json.dumps(out), flush=True)  # ready
        for _ in sys.stdin:  # one measurement per line the driver sends: ours and HF alternate inside it too
            best = {k: float("inf") for k in fns}
            for _ in range(repeat):
                for k, fn in fns.items():
                    t0 = time.perf_counter()
                    fn()
                    best[k] = min(best[k], time.perf_counter() - t0)
            print(json.dumps({k: tokens / s for k, s in best.items()}), flush=True)


def _hf_gpt2(torch):
    try:
        from transformers import GPT2Config, GPT2LMHeadModel
        from transformers.utils import logging as hf_logging
    except ImportError:
        return None
    hf_logging.set_verbosity_error()
    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=V,
        n_positions=T,
        n_embd=D,
        n_layer=L,
        n_head=H,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=0,
        eos_token_id=0,
    )
    return GPT2LMHeadModel._from_config(config, attn_implementation="sdpa").eval()


# ---------------------------------------------------------------------------------------------- the driver side
class Worker:
    """A subprocess holding one contender of one tree, built and warmed up; ``measure()`` asks it for one round."""

    def __init__(self, tree: Path, what: str, args) -> None:
        env = {
            **os.environ,
            "PYTHONPATH": str(tree),
            "OMP_NUM_THREADS": str(args.threads),
            "MKL_NUM_THREADS": str(args.threads),
        }
        env.setdefault("GLIBC_TUNABLES", "glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=68719476736")
        cmd = [
            sys.executable,
            str(Path(__file__).resolve()),
            "--worker",
            what,
            "--repeat",
            str(args.repeat),
            "--new",
            str(args.new),
            "--threads",
            str(args.threads),
        ]
        self.tree, self.what = tree, what
        self.err = tempfile.TemporaryFile(mode="w+")  # a file, not a pipe: warnings can never fill it and block
        self.proc = subprocess.Popen(
            cmd, env=env, cwd=tree, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.err, text=True
        )
        where = self._answer()["anatomy"]
        if Path(where) != tree.resolve():
            self.close()
            raise SystemExit(f"against_commit: {tree} imported anatomy from {where} (check PYTHONPATH)")

    def _answer(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait()
            self.err.seek(0)
            err = self.err.read()
            raise SystemExit(f"against_commit: the {self.what} worker of {self.tree} failed:\n{err[-2000:]}")
        return json.loads(line)

    def measure(self) -> dict:
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()
        return self._answer()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.err.close()


def compare(new: Path, old: Path, args) -> dict[str, dict[str, list[float]]]:
    """Tokens/s per round: ``{what: {"new": [...], "old": [...], "hf": [...]}}``. One worker per tree and
    contender; the rounds alternate between them (the order flips every round), seconds apart."""
    whats = [w for w in ("train", "inference", "decode") if w in args.only]
    speeds = {w: {"new": [], "old": [], "hf": []} for w in whats}
    for what in whats:
        workers = {"new": Worker(new, what, args), "old": Worker(old, what, args)}
        try:
            for r in range(args.rounds):
                for name in ("new", "old") if r % 2 == 0 else ("old", "new"):
                    result = workers[name].measure()
                    speeds[what][name].append(result["ours"])
                    if name == "new" and "hf_generate" in result:
                        speeds[what]["hf"].append(result["ours"] / result["hf_generate"])
        finally:
            for w in workers.values():
                w.close()
        s = speeds[what]
        print(
            f"  {what:9s} new / old per round " + " ".join(f"{a / b:.3f}" for a, b in zip(s["new"], s["old"])),
            flush=True,
        )
    return speeds


def summary(speeds: dict, rev: str) -> list[str]:
    lines = []
    for what, s in speeds.items():
        per_round = [a / b for a, b in zip(s["new"], s["old"])]
        line = (
            f"{what:9s} working tree {statistics.median(s['new']):9.0f} tokens/s, {rev} "
            f"{statistics.median(s['old']):9.0f}: new / old {statistics.median(per_round):5.3f} "
            f"(rounds {min(per_round):.3f}-{max(per_round):.3f})"
        )
        if s["hf"]:
            line += f"; new vs HF generate {statistics.median(s['hf']):4.2f}x (target >= 2)"
        lines.append(line)
    return lines


def checkout(rev: str, where: Path) -> None:
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "--quiet", str(where), rev], check=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rev", nargs="?", help="the commit to compare against (e.g. c49bb6b, HEAD~1)")
    parser.add_argument("--old-path", type=Path, help="an existing checkout of the old version instead of REV")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--new", type=int, default=200, help="new tokens per decode")
    parser.add_argument(
        "--only", nargs="+", default=["train", "inference", "decode"], choices=("train", "inference", "decode")
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        import torch

        torch.set_num_threads(args.threads)
        worker(args.worker, args.repeat, args.new)
        return
    if (args.rev is None) == (args.old_path is None):
        parser.error("give REV (a commit) or --old-path DIR, one of them")
    if args.rounds < 1 or args.repeat < 1 or args.threads < 1 or args.new < 1:
        parser.error("--rounds, --repeat, --threads and --new must be positive")
    rev = args.rev or str(args.old_path)
    print(
        f"working tree {ROOT} vs {rev}: {args.rounds} interleaved rounds, best of {args.repeat} per "
        f"subprocess, {args.threads} thread(s), load average {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="against-") as tmp:
        old = args.old_path
        if old is None:
            old = Path(tmp) / "old"
            checkout(args.rev, old)
        try:
            speeds = compare(ROOT, old.resolve(), args)
        finally:
            if args.old_path is None:
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(old)], check=False)
    for line in summary(speeds, rev):
        print(line)
    print(f"load average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
