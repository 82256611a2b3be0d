"""``anatomy predict``: a classifier checkpoint's label probabilities for each ``--text``."""

from __future__ import annotations

import argparse
import json

import torch

from anatomy.cli.generate import _load
from anatomy.cli.generate_options import add_predict_arguments

__all__ = ["add_predict_arguments", "run_predict"]


def run_predict(args: argparse.Namespace) -> int:
    from anatomy.cli.usage import UsageError
    from anatomy.training.checkpoint import TRAINING, read_json

    model, tokenizer, ckpt = _load(args.checkpoint)
    if model.config.architecture != "classifier":
        raise UsageError(
            f"{args.checkpoint!r} holds a {model.config.architecture} model; `anatomy predict` needs a "
            "classifier (use `anatomy generate` for text)"
        )
    names = [str(i) for i in range(model.config.num_labels)]
    if model.config.label_names is not None:  # the model's own (HF's id2label, read by convert)
        names = list(model.config.label_names)
    elif (ckpt / TRAINING).is_file():  # the run's data set
        names = read_json(ckpt / TRAINING).get("label_names", names)  # bounded, one line when bad
    results = []
    for text in args.text:
        ids = tokenizer.encode(text)[: model.config.max_seq_len] or [tokenizer.pad_id]
        with torch.no_grad():
            probs = model(torch.tensor([ids])).logits.float().softmax(-1)[0]
        results.append({"text": text, "probabilities": {n: float(p) for n, p in zip(names, probs)}})
    if args.format == "json":
        print(json.dumps(results, ensure_ascii=False, indent=2))
        return 0
    for r in results:
        ranked = sorted(r["probabilities"].items(), key=lambda kv: -kv[1])
        print(f"{r['text']}\n" + "\n".join(f"  {name:>10s}  {p:.3f}" for name, p in ranked))
    return 0
