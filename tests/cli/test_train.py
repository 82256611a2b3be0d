"""``anatomy train / generate / predict``: bad input exits 2 with one clear line and overwrites nothing; the three
commands run with no network at all (``unshare -rn``)."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from anatomy.cli.main import main

TINY = ["d_model=16", "n_heads=2", "n_layers=1", "d_ff=32", "batch_size=4", "block_size=16", "eval_batches=2",
        "warmup_steps=2", "progress=false", "plot=false", "eval_every=100", "save_every=2"]



def _corpus(tmp: Path) -> Path:
    path = tmp / "corpus.txt"
    path.write_text("\n\n".join(f"line {i}: the cat sat on the mat.\nand the dog ran." for i in range(80)) + "\n",
                    encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    """A tiny language model trained once for the tests of this file."""
    tmp = tmp_path_factory.mktemp("cli")
    torch.set_num_threads(1)
    assert main(["train", "task=lm", f"corpus={_corpus(tmp)}", *TINY, "steps=4", "--out", str(tmp / "run")]) == 0
    return tmp / "run"


def _fingerprint(run_dir: Path) -> dict[str, str]:
    return {str(p.relative_to(run_dir)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(run_dir.rglob("*")) if p.is_file()}


def _error(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    return err[-1] if err else ""


@pytest.mark.parametrize("argv, expected", [
    (["train", "--preset", "char-nope", "--out", "X"],
     "unknown preset 'char-nope'; valid presets: bpe-shakespeare, char-shakespeare"),
    (["train", "stepz=3", "--out", "X"], "unknown key 'stepz'; valid keys: "),
    (["train", "steps=three", "--out", "X"], "steps must be an integer, got 'three'"),
    (["train", "compile=maybe", "--out", "X"], "compile must be a boolean (true/false), got 'maybe'"),
    (["train", "lr", "--out", "X"], "expected key=value, got 'lr'"),
    (["train", "vocab_size=10", "--out", "X"], "vocab_size is set from the data"),
    (["train", "d_model=30", "n_heads=4", "corpus=tang300", "steps=1", "--out", "X"], "divisible by n_heads"),
    (["train", "precision=fp8", "--out", "X"], "precision must be one of fp32, bf16"),
    (["train", "--preset", "char-tang"], "--out DIR is required"),
])
def test_bad_usage_exits_2_with_one_line(argv, expected, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    assert expected in _error(capsys)
    assert not (tmp_path / "X").exists()


def test_unknown_key_lists_valid_keys(capsys):
    assert main(["train", "stepz=3", "--out", "X"]) == 2
    line = _error(capsys)
    for key in ("steps", "batch_size", "block_size", "lr", "warmup_steps", "eval_every", "save_every", "seed",
                "precision", "compile", "d_model", "n_heads", "positional"):
        assert key in line


def test_corpus_not_utf8_or_empty(tmp_path, capsys):
    bad = tmp_path / "gbk.txt"
    bad.write_bytes("床前明月光".encode("gb18030"))
    empty = tmp_path / "empty.txt"
    empty.write_text("  \n\n", encoding="utf-8")
    assert main(["train", f"corpus={bad}", *TINY, "--out", str(tmp_path / "a")]) == 2
    assert "is not UTF-8 text: byte 0xb4 at offset 0" in _error(capsys)
    assert main(["train", f"corpus={empty}", *TINY, "--out", str(tmp_path / "b")]) == 2
    assert "is empty" in _error(capsys)
    assert main(["train", "corpus=missing.txt", *TINY, "--out", str(tmp_path / "c")]) == 2
    assert "does not exist" in _error(capsys)
    assert not any((tmp_path / n).exists() for n in "abc")


def test_resume_missing_or_from_another_config_overwrites_nothing(run, tmp_path, capsys):
    before = _fingerprint(run)
    assert main(["train", "--resume", str(tmp_path / "nowhere")]) == 2
    assert "does not exist" in _error(capsys)
    assert main(["train", "--resume", str(run), "lr=0.5"]) == 2
    assert "lr=0.5 cannot change on resume" in _error(capsys)
    assert main(["train", "--resume", str(run), "d_model=64"]) == 2
    assert "d_model=64 cannot change on resume" in _error(capsys)
    assert main(["train", "--preset", "char-shakespeare", "--resume", str(run)]) == 2
    assert "comes from another configuration than --preset char-shakespeare" in _error(capsys)
    assert main(["train", "task=lm", *TINY, "steps=4", "--out", str(run)]) == 2  # --out of an existing run
    assert "already holds a training run" in _error(capsys)
    not_training = tmp_path / "plain"
    not_training.mkdir()
    (not_training / "config.json").write_text("{}")
    (not_training / "model.safetensors").write_bytes(b"")
    assert main(["train", "--resume", str(not_training)]) == 2
    assert "is not a training checkpoint" in _error(capsys)
    assert _fingerprint(run) == before


def test_generate_and_predict_bad_input(run, tmp_path, capsys):
    assert main(["generate", "--checkpoint", str(run), "--prompt", "the 猫"]) == 2
    assert "1 character(s) are not in the tokenizer's vocabulary: '猫'" in _error(capsys)
    assert main(["generate", "--checkpoint", str(tmp_path / "none"), "--prompt", "the"]) == 2
    assert "does not exist" in _error(capsys)
    assert main(["predict", "--checkpoint", str(run), "--text", "the"]) == 2
    assert "needs a classifier" in _error(capsys)
    assert main(["generate", "--checkpoint", str(run), "--prompt", "the", "--max-new-tokens", "40"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("the") and len(out.rstrip("\n")) >= len("the") + 1


def test_resume_extends_a_finished_run(run, tmp_path, capsys):
    copy = tmp_path / "more"
    shutil.copytree(run, copy)
    assert main(["train", "--resume", str(copy), "steps=6"]) == 0
    assert "step-000006" in {p.name for p in (copy / "checkpoints").iterdir()}


def _unshare_works() -> bool:
    if not shutil.which("unshare"):
        return False
    return subprocess.run(["unshare", "-rn", "true"], capture_output=True).returncode == 0


@pytest.mark.skipif(not _unshare_works(), reason="`unshare -rn` is not permitted here (needs user namespaces)")
def test_train_generate_predict_evaluate_offline(tmp_path):
    """Inside a network namespace with no interface but loopback down: nothing may reach for the network."""
    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "HF_HUB_OFFLINE": "0"}
    py = [sys.executable, "-m", "anatomy"]
    script = " && ".join([
        " ".join([*py, "train", "--preset", "char-tang", "corpus=tang300", *TINY, "steps=2", "--out",
                  str(tmp_path / "lm")]),
        " ".join([*py, "generate", "--checkpoint", str(tmp_path / "lm"), "--prompt", "床前明月光",
                  "--max-new-tokens", "10"]),
        " ".join([*py, "train", "--preset", "sentiment-en", *TINY, "bpe_vocab=300", "baselines=false", "steps=2",
                  "--out", str(tmp_path / "cls")]),
        " ".join([*py, "predict", "--checkpoint", str(tmp_path / "cls"), "--text", "'a fine film'"]),
        " ".join([*py, "evaluate", "--checkpoint", str(tmp_path / "cls")]),
    ])
    done = subprocess.run(["unshare", "-rn", "bash", "-c", script], env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[0].startswith("床前明月光")
    assert "a fine film" in lines[1] and "positive" in done.stdout and "negative" in done.stdout
    assert "(step 2, classify), test: loss " in lines[-1] and "accuracy " in lines[-1]
