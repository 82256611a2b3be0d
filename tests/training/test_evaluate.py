"""evaluate_checkpoint rebuilds the run's task from training.json and evaluates as training did: the last
checkpoint's test loss is the summary's test_loss, for each task; val of an earlier checkpoint is what training
logged at that step."""

from __future__ import annotations

import json
import math

import pytest

from anatomy.training import checkpoint as ckpt
from anatomy.training import loop
from anatomy.training.evaluate import evaluate_checkpoint
from anatomy.training.options import parse_words, resolve

from .helpers import lm_words

SEQ2SEQ = [
    "task=seq2seq",
    "model=vaswani-2017",
    "seq2seq_task=reverse",
    "d_model=16",
    "n_heads=2",
    "n_layers=1",
    "d_ff=32",
    "batch_size=8",
    "eval_batches=2",
    "warmup_steps=2",
    "progress=false",
    "plot=false",
]


def _train(tmp_path, words):
    options, model = resolve(None, parse_words(words))
    loop.train(options, model, tmp_path / "run", log=lambda m: None)
    return json.loads((tmp_path / "run" / "summary.json").read_text())


@pytest.mark.parametrize("task", ["lm", "seq2seq"])
def test_test_split_of_the_last_checkpoint_is_the_summarys(tmp_path, task):
    words = (
        lm_words(tmp_path, "steps=6", "eval_every=3", "save_every=3")
        if task == "lm"
        else [*SEQ2SEQ, "steps=6", "eval_every=3", "save_every=3"]
    )
    summary = _train(tmp_path, words)
    result = evaluate_checkpoint(tmp_path / "run", device="cpu")
    assert result["task"] == task and result["split"] == "test" and result["step"] == 6
    assert result["loss"] == pytest.approx(summary["test_loss"], rel=1e-6)
    assert result["perplexity"] == pytest.approx(math.exp(result["loss"]))
    if task == "seq2seq":
        assert result["exact_match"] == pytest.approx(summary["test_exact_match"], rel=1e-6)


def test_val_of_an_earlier_checkpoint_is_what_training_logged(tmp_path):
    _train(tmp_path, lm_words(tmp_path, "steps=6", "eval_every=3", "save_every=3", "keep_last=5", "log_every=3"))
    rows = {r["step"]: r for r in map(json.loads, (tmp_path / "run" / "metrics.jsonl").read_text().splitlines())}
    first = ckpt.step_dirs(tmp_path / "run")[0]
    result = evaluate_checkpoint(first, split="val", device="cpu")
    assert result["step"] == 3 and result["loss"] == pytest.approx(rows[3]["val_loss"], rel=1e-6)


def test_bad_input_is_named(tmp_path):
    with pytest.raises(ValueError, match="split must be one of val, test, got 'train'"):
        evaluate_checkpoint(tmp_path, split="train")
    with pytest.raises(ckpt.CheckpointError, match="does not exist"):
        evaluate_checkpoint(tmp_path / "nowhere")
    _train(tmp_path, lm_words(tmp_path, "steps=2", "eval_every=2", "save_every=2"))
    with pytest.raises(ValueError, match="batch size must be a positive integer, got 0"):
        evaluate_checkpoint(tmp_path / "run", batch_size=0)
    last = ckpt.step_dirs(tmp_path / "run")[-1]
    (last / ckpt.TRAINING).unlink()
    with pytest.raises(ckpt.CheckpointError, match="training.json: it was not written by `anatomy train`"):
        evaluate_checkpoint(last)
