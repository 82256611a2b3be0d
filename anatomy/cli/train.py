"""``anatomy train``: train a model from a preset and ``key=value`` words; ``--resume`` continues a run exactly.

anatomy train --preset char-shakespeare --out runs/shakespeare
anatomy train --preset sentiment-zh steps=500 d_model=256 --out runs/zh
anatomy train --resume runs/shakespeare
torchrun --nproc-per-node 2 -m anatomy train --preset char-tang --out runs/tang
"""

from __future__ import annotations

import argparse
import sys

from anatomy.training.options import RUN_PRESETS, parse_words, resolve, valid_keys


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = (
        "presets: " + ", ".join(sorted(RUN_PRESETS)) + "\nkeys: " + ", ".join(valid_keys()) + "\nSee docs/training.md."
    )
    p.add_argument("--preset", help="a training preset (see below)")
    p.add_argument("--out", help="the run directory to create (metrics.jsonl, checkpoints/, loss.png)")
    p.add_argument("--resume", metavar="DIR", help="continue the latest checkpoint of a run directory exactly")
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="let --out be a non-empty folder that `anatomy train` did not create (its files of the same "
        "names are replaced)",
    )
    p.add_argument("--list-presets", action="store_true", help="print the presets and their settings, then exit")
    p.add_argument("words", nargs="*", metavar="key=value", help="training options and model config fields")


def run(args: argparse.Namespace) -> int:
    from anatomy.cli.usage import UsageError
    from anatomy.training.loop import TrainingError, resume, train

    if args.list_presets:
        for name in sorted(RUN_PRESETS):
            print(f"{name}: " + " ".join(f"{k}={v}" for k, v in RUN_PRESETS[name].items()))
        return 0
    words = parse_words(args.words)
    if args.resume and args.out:
        raise UsageError("give either --out DIR (a new run) or --resume DIR (continue one), not both")
    try:
        if args.resume:
            resume(args.resume, words, preset=args.preset)
        else:
            if not args.out:
                raise UsageError("--out DIR is required (or --resume DIR to continue a run)")
            options, model_overrides = resolve(args.preset, words)
            train(options, model_overrides, args.out, overwrite=args.overwrite)
    except TrainingError as err:
        print(f"anatomy train: {err}", file=sys.stderr)
        return 1
    return 0
