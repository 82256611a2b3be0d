"""Evaluate a saved checkpoint on its run's own data split, exactly as training evaluated it.

    evaluate_checkpoint("runs/shakespeare")                 # the test split: {"loss": ..., "perplexity": ...}
    evaluate_checkpoint("runs/zh", split="val")             # classify: loss and accuracy
    evaluate_file("converted/gpt2", "my_text.txt")          # any language model on any UTF-8 file

The run's options (training.json) rebuild the same task: the same corpus or labelled set, the same ``data_seed``
split, the saved tokenizer, the same evaluation batches and precision. So the test loss of a run's last checkpoint
is the ``test_loss`` its summary.json reports.

``evaluate_file`` scores a language model (from ``anatomy train`` or ``anatomy convert``) on any UTF-8 text with the
checkpoint's own tokenizer: the whole file is encoded once, then read in windows of ``block`` tokens (default the
model's ``max_seq_len``) that overlap by one token, so every token after the first is predicted exactly once, from
the up to ``block - 1`` tokens before it in its window. ``loss`` is the mean of those predictions' negative log
likelihoods (nats, summed in float64), ``perplexity`` its exp, ``bits_per_byte`` the summed loss over the file's
UTF-8 bytes in bits, which compares models with different tokenizers.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from anatomy.errors import CheckpointError
from anatomy.training import checkpoint as ckpt
from anatomy.training.distributed import device_for
from anatomy.training.options import TrainOptions
from anatomy.training.resuming import check_data
from anatomy.training.step import autocast_for, to_device
from anatomy.training.tasks import make_task

SPLITS = ("val", "test")


def evaluate_checkpoint(
    path: str | Path, *, split: str = "test", batch_size: int | None = None, device: str = "auto"
) -> dict[str, Any]:
    """Metrics of the checkpoint at ``path`` (a run or checkpoint directory) on ``split`` of its run's data:
    ``loss`` and, by task, ``perplexity`` (lm, seq2seq: exp of the mean token loss), ``accuracy`` (classify),
    ``exact_match`` (seq2seq, teacher-forced)."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {', '.join(SPLITS)}, got {split!r}")
    if batch_size is not None and batch_size <= 0:
        raise ValueError(f"batch size must be a positive integer, got {batch_size}")
    where = ckpt.resolve(path)
    if not (where / ckpt.TRAINING).is_file():
        raise CheckpointError(
            f"{str(where)!r} has no {ckpt.TRAINING}: it was not written by `anatomy train`, "
            "so its data split is unknown; score a text file with --file TEXT instead"
        )
    training = ckpt.read_json(where / ckpt.TRAINING)
    try:
        options = TrainOptions(**training["options"])
    except (TypeError, KeyError) as err:
        raise CheckpointError(f"cannot read the run's options in {str(where / ckpt.TRAINING)!r}: {err}") from None
    run_device = device_for(device)
    model, tokenizer, _ = ckpt.load_model(where, device=run_device)
    try:
        task = make_task(options, tokenizer)
    except FileNotFoundError as err:
        raise ValueError(f"the run's data is gone: {err}") from None
    check_data(
        task.data_digest,
        training.get("data"),
        where,
        remedy=f"its {split} split would not be the run's; restore the text, or score a file with --file TEXT",
    )

    def loss_and_logits(batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:  # as training does
        with autocast_for(options.precision, run_device):
            out = model(**to_device(batch, run_device))
        return out.loss, out.logits

    with torch.no_grad():
        metrics = {
            k: float(v) for k, v in task.evaluate(loss_and_logits, split, batch_size or options.batch_size).items()
        }
    if options.task in ("lm", "seq2seq"):
        metrics["perplexity"] = math.exp(metrics["loss"]) if metrics["loss"] < 700 else math.inf
    step = ckpt.read_json(where / ckpt.STATE).get("step") if (where / ckpt.STATE).is_file() else None
    return {"checkpoint": str(where), "step": step, "task": options.task, "split": split, **metrics}


def file_windows(n_tokens: int, block: int) -> list[tuple[int, int]]:
    """``[(start, end), ...]``: windows of at most ``block`` tokens overlapping by one, covering ``0..n_tokens``, so
    that each token ``1..n_tokens-1`` is a target of exactly one window."""
    if block < 2:
        raise ValueError(f"block must be at least 2 (one token of context, one to predict), got {block}")
    return [(s, min(s + block, n_tokens)) for s in range(0, max(n_tokens - 1, 1), block - 1)]


def evaluate_file(
    path: str | Path, file: str | Path, *, block: int | None = None, batch_size: int = 8, device: str = "auto"
) -> dict[str, Any]:
    """``loss`` (mean nats per predicted token), ``perplexity`` and ``bits_per_byte`` of the language model at
    ``path`` on the UTF-8 text ``file`` (see the module docstring for the windows)."""
    from anatomy.data.corpora import read_text_file

    if batch_size <= 0:
        raise ValueError(f"batch size must be a positive integer, got {batch_size}")
    text = read_text_file(file, what="--file")
    run_device = device_for(device)
    model, tokenizer, where = ckpt.load_model(path, device=run_device)
    config = ckpt.config_of(model)
    if config.architecture != "decoder_lm":
        raise ValueError(
            f"--file scores a language model; {str(where)!r} holds a {config.architecture} model "
            "(evaluate it on its run's --split)"
        )
    block = config.max_seq_len if block is None else block
    if not 2 <= block <= config.max_seq_len:
        raise ValueError(f"--block must be between 2 and the model's max_seq_len={config.max_seq_len}, got {block}")
    try:
        ids = torch.tensor(tokenizer.encode(text), dtype=torch.long)
    except ValueError as err:  # characters a character tokenizer does not know: named
        raise ValueError(f"--file {file}: {err}") from None
    if len(ids) < 2:
        raise ValueError(f"--file {str(file)!r} encodes to {len(ids)} token(s); scoring needs at least 2")
    if int(ids.max()) >= config.vocab_size:
        raise ValueError(f"the tokenizer gave id {int(ids.max())}, beyond the model's vocab_size={config.vocab_size}")
    windows = file_windows(len(ids), block)
    total, count = torch.zeros((), dtype=torch.float64), 0
    with torch.no_grad():
        for i in range(0, len(windows), batch_size):
            group = windows[i : i + batch_size]
            full = [w for w in group if w[1] - w[0] == group[0][1] - group[0][0]]  # equal lengths batch together
            for chunk in (full, [w for w in group if w not in full]):
                if not chunk:
                    continue
                x = torch.stack([ids[s:e] for s, e in chunk]).to(run_device)  # (B, T)
                logits = model(input_ids=x).logits.float()  # (B, T, V)
                nll = F.cross_entropy(logits[:, :-1].flatten(0, 1), x[:, 1:].flatten(), reduction="sum")  # (B*(T-1), V)
                total += nll.double().cpu()
                count += x[:, 1:].numel()
    loss = float(total / count)
    n_bytes = len(text.encode("utf-8"))
    return {
        "checkpoint": str(where),
        "file": str(file),
        "tokens": len(ids),
        "predicted": count,
        "block": block,
        "loss": loss,
        "perplexity": math.exp(loss) if loss < 700 else math.inf,
        "bits_per_byte": float(total) / math.log(2) / n_bytes,
    }
