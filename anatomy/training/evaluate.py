"""Evaluate a saved checkpoint on its run's own data split, exactly as training evaluated it.

    evaluate_checkpoint("runs/shakespeare")                 # the test split: {"loss": ..., "perplexity": ...}
    evaluate_checkpoint("runs/zh", split="val")             # classify: loss and accuracy

The run's options (training.json) rebuild the same task: the same corpus or labelled set, the same ``data_seed``
split, the saved tokenizer, the same evaluation batches and precision. So the test loss of a run's last checkpoint
is the ``test_loss`` its summary.json reports.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch

from anatomy.training import checkpoint as ckpt
from anatomy.training.distributed import device_for
from anatomy.training.loop import autocast_for, to_device
from anatomy.training.options import TrainOptions
from anatomy.training.tasks import make_task

SPLITS = ("val", "test")


def evaluate_checkpoint(path: str | Path, *, split: str = "test", batch_size: int | None = None,
                        device: str = "auto") -> dict[str, Any]:
    """Metrics of the checkpoint at ``path`` (a run or checkpoint directory) on ``split`` of its run's data:
    ``loss`` and, by task, ``perplexity`` (lm, seq2seq: exp of the mean token loss), ``accuracy`` (classify),
    ``exact_match`` (seq2seq, teacher-forced)."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {', '.join(SPLITS)}, got {split!r}")
    if batch_size is not None and batch_size <= 0:
        raise ValueError(f"batch size must be a positive integer, got {batch_size}")
    where = ckpt.resolve(path)
    if not (where / ckpt.TRAINING).is_file():
        raise ckpt.CheckpointError(f"{str(where)!r} has no {ckpt.TRAINING}: it was not written by `anatomy train`, "
                                   "so its data split is unknown")
    training = ckpt.read_json(where / ckpt.TRAINING)
    try:
        options = TrainOptions(**training["options"])
    except (TypeError, KeyError) as err:
        raise ckpt.CheckpointError(f"cannot read the run's options in {str(where / ckpt.TRAINING)!r}: {err}") from None
    run_device = device_for(device)
    model, tokenizer, _ = ckpt.load_model(where, device=run_device)
    try:
        task = make_task(options, tokenizer)
    except FileNotFoundError as err:
        raise ValueError(f"the run's data is gone: {err}") from None
    def loss_and_logits(batch):  # as training evaluates
        with autocast_for(options.precision, run_device):
            out = model(**to_device(batch, run_device))
        return out.loss, out.logits

    with torch.no_grad():
        metrics = {k: float(v) for k, v in task.evaluate(loss_and_logits, split, batch_size or options.batch_size)
                   .items()}
    if options.task in ("lm", "seq2seq"):
        metrics["perplexity"] = math.exp(metrics["loss"]) if metrics["loss"] < 700 else math.inf
    step = ckpt.read_json(where / ckpt.STATE).get("step") if (where / ckpt.STATE).is_file() else None
    return {"checkpoint": str(where), "step": step, "task": options.task, "split": split, **metrics}
