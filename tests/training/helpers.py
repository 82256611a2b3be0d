"""Tiny settings shared by the training tests: a model of a few thousand parameters on a small corpus."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

TINY_MODEL = ["d_model=16", "n_heads=2", "n_layers=1", "d_ff=32"]
TINY_RUN = ["batch_size=4", "block_size=16", "eval_batches=2", "warmup_steps=2", "progress=false", "plot=false"]


def corpus(tmp: Path) -> Path:
    """A small English corpus (a few dozen characters of vocabulary) in blank-line separated paragraphs."""
    lines = [
        "the cat sat on the mat.",
        "a dog ran to the park!",
        "we read books at night?",
        "birds sing in the morning.",
        "rain falls on green hills;",
        "fish swim in the river, slowly.",
    ]
    paragraphs = ["\n".join(lines[(i + k) % len(lines)] for k in range(3)) for i in range(60)]
    path = tmp / "corpus.txt"
    path.write_text("\n\n".join(paragraphs) + "\n", encoding="utf-8")
    return path


def lm_words(tmp: Path, *extra: str) -> list[str]:
    return ["task=lm", "tokenizer=char", f"corpus={corpus(tmp)}", *TINY_MODEL, *TINY_RUN, *extra]


def env() -> dict[str, str]:
    """Subprocesses: one thread (bit-exact and polite on a shared machine), the package importable."""
    root = str(Path(__file__).resolve().parents[2])
    return {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", ""),
    }


ANATOMY = [sys.executable, "-m", "anatomy"]


def losses(run_dir: Path) -> list[tuple[int, float]]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [(r["step"], r["loss"]) for r in rows]
