"""Gradient accumulation (``accumulate=k``): k micro-batches per optimizer step give the losses of one full batch
(lm: every row has the same number of tokens, so the mean of the micro-batch means is the batch mean); a batch
that does not split is refused naming both numbers."""

from __future__ import annotations

import json

import pytest

from anatomy.cli.main import main
from anatomy.training import loop
from anatomy.training.options import parse_words, resolve

from .helpers import lm_words, losses


def _run(tmp_path, name, *extra):
    options, model = resolve(
        None,
        parse_words(
            lm_words(
                tmp_path,
                "steps=8",
                "log_every=1",
                "eval_every=4",
                "save_every=100",
                "batch_size=8",
                "dropout=0",
                "attention_dropout=0",
                *extra,
            )
        ),
    )  # masks differ by shape
    loop.train(options, model, tmp_path / name, log=lambda m: None)
    return losses(tmp_path / name)


@pytest.mark.parametrize("k", [2, 4])
def test_accumulated_steps_equal_full_batch_steps(tmp_path, k):
    full = _run(tmp_path, "full")
    accumulated = _run(tmp_path, f"acc{k}", f"accumulate={k}")
    assert [s for s, _ in full] == [s for s, _ in accumulated] == list(range(1, 9))
    assert max(abs(a - b) for (_, a), (_, b) in zip(full, accumulated)) <= 1e-5
    rows = [json.loads(line) for line in (tmp_path / f"acc{k}" / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["tokens_per_s"] > 0


def test_a_batch_that_does_not_split_is_refused(tmp_path, capsys):
    code = main(
        ["train", *lm_words(tmp_path, "steps=2", "batch_size=8", "accumulate=3"), "--out", str(tmp_path / "run")]
    )
    err = capsys.readouterr().err.strip()
    assert code == 2 and "batch_size=8" in err and "accumulate (3)" in err
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_accumulate_must_be_positive(tmp_path):
    with pytest.raises(ValueError, match="accumulate must be a positive integer, got 0"):
        resolve(None, parse_words(lm_words(tmp_path, "accumulate=0")))
