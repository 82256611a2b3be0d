"""``anatomy evaluate``: a checkpoint's metrics on its run's own val or test split, or a language model on a file.

anatomy evaluate --checkpoint runs/shakespeare                  # test loss and perplexity
anatomy evaluate --checkpoint runs/zh --split val --format json  # classify: loss and accuracy
anatomy evaluate --checkpoint converted/gpt2 --file notes.txt   # any UTF-8 file, the checkpoint's tokenizer
"""

from __future__ import annotations

import argparse
import json

from anatomy.training.evaluate import SPLITS
from anatomy.training.options import DEVICES


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--checkpoint", required=True, help="a run directory (its latest checkpoint) or a checkpoint")
    p.add_argument("--split", choices=SPLITS, default=None, help="which split of the run's data (default test)")
    p.add_argument(
        "--file",
        metavar="TEXT",
        default=None,
        help="score a language model on this UTF-8 text file instead (loss, perplexity, bits per byte)",
    )
    p.add_argument(
        "--block", type=int, default=None, help="with --file: tokens per window (default the model's max_seq_len)"
    )
    p.add_argument("--batch-size", type=int, default=None, help="evaluation batch (default: the run's batch_size)")
    p.add_argument("--device", choices=DEVICES, default="auto")
    p.add_argument("--format", choices=("text", "json"), default="text")


def run(args: argparse.Namespace) -> int:
    from anatomy.cli.usage import UsageError
    from anatomy.training.evaluate import evaluate_checkpoint, evaluate_file

    if args.batch_size is not None and args.batch_size <= 0:
        raise UsageError(f"--batch-size must be a positive integer, got {args.batch_size}")
    if args.file is not None and args.split is not None:
        raise UsageError(f"give --split {args.split} (the run's own data) or --file {args.file}, not both")
    if args.block is not None and args.file is None:
        raise UsageError("--block goes with --file")
    if args.file is not None:
        result = evaluate_file(
            args.checkpoint, args.file, block=args.block, batch_size=args.batch_size or 8, device=args.device
        )
        if args.format == "json":
            print(json.dumps(result, indent=2))
            return 0
        print(
            f"{result['checkpoint']} on {result['file']}: {result['predicted']} of {result['tokens']} tokens "
            f"predicted (windows of {result['block']}): loss {result['loss']:.4f}, perplexity "
            f"{result['perplexity']:.4f}, bits per byte {result['bits_per_byte']:.4f}"
        )
        return 0
    result = evaluate_checkpoint(
        args.checkpoint, split=args.split or "test", batch_size=args.batch_size, device=args.device
    )
    if args.format == "json":
        print(json.dumps(result, indent=2))
        return 0
    shown = ", ".join(f"{k} {v:.4f}" for k, v in result.items() if isinstance(v, float))
    print(f"{result['checkpoint']} (step {result['step']}, {result['task']}), {result['split']}: {shown}")
    return 0
