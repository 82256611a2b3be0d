"""``anatomy evaluate``: a checkpoint's metrics on its run's own val or test split.

    anatomy evaluate --checkpoint runs/shakespeare                  # test loss and perplexity
    anatomy evaluate --checkpoint runs/zh --split val --format json  # classify: loss and accuracy
"""

from __future__ import annotations

import argparse
import json

from anatomy.training.evaluate import SPLITS
from anatomy.training.options import DEVICES


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--checkpoint", required=True, help="a run directory (its latest checkpoint) or a checkpoint")
    p.add_argument("--split", choices=SPLITS, default="test", help="which split of the run's data (default test)")
    p.add_argument("--batch-size", type=int, default=None, help="evaluation batch (default: the run's batch_size)")
    p.add_argument("--device", choices=DEVICES, default="auto")
    p.add_argument("--format", choices=("text", "json"), default="text")


def run(args: argparse.Namespace) -> int:
    from anatomy.cli.main import UsageError
    from anatomy.training.evaluate import evaluate_checkpoint

    if args.batch_size is not None and args.batch_size <= 0:
        raise UsageError(f"--batch-size must be a positive integer, got {args.batch_size}")
    result = evaluate_checkpoint(args.checkpoint, split=args.split, batch_size=args.batch_size, device=args.device)
    if args.format == "json":
        print(json.dumps(result, indent=2))
        return 0
    shown = ", ".join(f"{k} {v:.4f}" for k, v in result.items() if isinstance(v, float))
    print(f"{result['checkpoint']} (step {result['step']}, {result['task']}), {result['split']}: {shown}")
    return 0
