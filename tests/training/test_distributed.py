"""torchrun with 2 processes (gloo, CPU) gives the losses of one process with the same global batch, also when each
process accumulates its rows in micro-batches (one all-reduce per step)."""

from __future__ import annotations

import subprocess
import sys

from anatomy.training import checkpoint as ckpt

from .helpers import ANATOMY, env, lm_words, losses


def test_two_processes_match_one_with_the_same_global_batch(tmp_path):
    words = lm_words(
        tmp_path,
        "steps=20",
        "log_every=1",
        "eval_every=10",
        "save_every=10",
        "batch_size=8",
        "dropout=0",
        "attention_dropout=0",
    )  # dropout masks are drawn per process
    one = subprocess.run(
        [*ANATOMY, "train", *words, "--out", str(tmp_path / "one")],
        env=env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert one.returncode == 0, one.stderr
    two = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            "2",
            "-m",
            "anatomy",
            "train",
            *words,
            "--out",
            str(tmp_path / "two"),
        ],
        env=env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert two.returncode == 0, two.stderr[-3000:]
    assert "x 2 process(es)" in two.stderr and two.stderr.count("training decoder_lm") == 1  # rank 0 logs alone
    a, b = losses(tmp_path / "one"), losses(tmp_path / "two")
    assert [s for s, _ in a] == [s for s, _ in b] == list(range(1, 21))
    assert max(abs(x - y) for (_, x), (_, y) in zip(a, b)) <= 1e-5
    assert [d.name for d in ckpt.step_dirs(tmp_path / "two")] == ["step-000010", "step-000020"]


def test_two_processes_accumulating_match_one(tmp_path):
    words = lm_words(
        tmp_path,
        "steps=6",
        "log_every=1",
        "eval_every=6",
        "save_every=6",
        "batch_size=8",
        "dropout=0",
        "attention_dropout=0",
    )
    one = subprocess.run(
        [*ANATOMY, "train", *words, "--out", str(tmp_path / "one")],
        env=env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert one.returncode == 0, one.stderr
    two = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            "2",
            "-m",
            "anatomy",
            "train",
            *words,
            "accumulate=2",
            "--out",
            str(tmp_path / "two"),
        ],
        env=env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert two.returncode == 0, two.stderr[-3000:]
    a, b = losses(tmp_path / "one"), losses(tmp_path / "two")
    assert [s for s, _ in a] == [s for s, _ in b] == list(range(1, 7))
    assert max(abs(x - y) for (_, x), (_, y) in zip(a, b)) <= 1e-5
