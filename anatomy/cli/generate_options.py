"""The options of ``anatomy generate`` and ``anatomy predict`` (argparse), and their checks before a model is
loaded or anything is allocated: contradictions and ranges (one line naming the options), the prompts file, and
the sizes the options ask for once the model is known (:func:`check_sizes`: the seeds of the output rows, their
KV cache, the text the command line keeps)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from anatomy.cli.decoding_defaults import SAMPLING, _flag
from anatomy.generation import limits

if TYPE_CHECKING:
    from anatomy.config import ModelConfig

Usage = Callable[[str], Exception]  # makes the error a bad option raises (UsageError)


def add_generate_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--checkpoint", required=True, help="a run directory or a checkpoint directory")
    p.add_argument("--prompt", help="the text to continue (seq2seq: the source text)")
    p.add_argument(
        "--prompts-file",
        metavar="FILE",
        help="UTF-8 text, one prompt per line (or a JSON string per line); run as one batch",
    )
    p.add_argument(
        "--max-new-tokens",
        type=int,
        default=None,
        help="the token budget (default: the checkpoint's generation_config.json, HF's 20 where it sets none; "
        "200 without the file)",
    )
    p.add_argument("--greedy", action="store_true", help="arg-max decoding instead of sampling")
    p.add_argument(
        "--sample",
        action="store_true",
        help="sample (the default without a generation_config.json; under one, its do_sample, else HF's greedy)",
    )
    p.add_argument(
        "--temperature",
        type=float,
        default=None,
        help="sampling temperature (default: generation_config.json's, HF's 1.0 where it sets none; 0.8 without it)",
    )
    p.add_argument(
        "--top-k",
        type=int,
        default=None,
        help="sample from the k most likely tokens (default 50, as Hugging Face; 0: no cut)",
    )
    p.add_argument("--top-p", type=float, default=None, help="nucleus sampling: the smallest set reaching p")
    p.add_argument(
        "--min-p", type=float, default=None, help="keep tokens at least p times as likely as the most likely one"
    )
    p.add_argument(
        "--repetition-penalty",
        type=float,
        default=None,
        help="> 1 makes tokens already in the text less likely (CTRL; HF's repetition_penalty)",
    )
    p.add_argument(
        "--num-beams",
        type=int,
        default=None,
        help="beam search with this many beams (no sampling; default: generation_config.json's, else 1)",
    )
    p.add_argument(
        "--length-penalty",
        type=float,
        default=None,
        help="beam search: > 0 favours longer outputs, < 0 shorter (default 1.0)",
    )
    p.add_argument(
        "--early-stopping",
        choices=("true", "false", "never"),
        default=None,
        help="beam search: when to stop (HF's early_stopping; default false)",
    )
    p.add_argument(
        "--num-return-sequences",
        type=int,
        default=None,
        help="outputs per prompt, sampled or beams (default: generation_config.json's, else 1)",
    )
    p.add_argument(
        "--stop",
        action="append",
        default=None,
        metavar="TEXT",
        help="stop a sequence when its text completes TEXT (repeat for several; \\n is a newline)",
    )
    p.add_argument(
        "--eos",
        default=None,
        metavar="ID|none",
        help="stop at these token ids (comma-separated) instead of the model's eos; none: never stop early",
    )
    p.add_argument(
        "--stream",
        action="store_true",
        help="print the text as it is generated (the same samples as without it, for the same --seed)",
    )
    p.add_argument(
        "--compile",
        choices=("auto", "on", "off"),
        default="auto",
        help="decode with the torch.compile'd step on static caches: auto (default) when the generation is long "
        "enough to repay the warm-up; on, off (the same tokens either way)",
    )
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.add_argument("--seed", type=int, default=0, help="the sampling generator's seed (default 0)")


def add_predict_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--checkpoint", required=True, help="a run directory or a checkpoint directory")
    p.add_argument("--text", required=True, action="append", help="text to classify (repeat for several)")
    p.add_argument("--format", choices=("text", "json"), default="text")


def _check_options(args: argparse.Namespace, usage: Usage) -> None:
    """Contradictions and out-of-range values: one line naming the options."""
    if (args.prompt is None) == (args.prompts_file is None):
        raise usage(
            "give --prompt TEXT or --prompts-file FILE"
            if args.prompt is None
            else "give --prompt or --prompts-file, not both"
        )
    if args.max_new_tokens is not None and args.max_new_tokens < 0:
        raise usage(f"--max-new-tokens must be >= 0, got {args.max_new_tokens}")
    for name in ("num_beams", "num_return_sequences"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            raise usage(f"{_flag(name)} must be >= 1, got {getattr(args, name)}")
    ranges: dict[str, tuple[Callable[[float], bool], str]] = {
        "temperature": (lambda v: v > 0, "> 0"),
        "top_k": (lambda v: v >= 0, ">= 0 (0: no cut)"),
        "top_p": (lambda v: 0 < v <= 1, "in (0, 1]"),
        "min_p": (lambda v: 0 <= v <= 1, "in [0, 1]"),
        "repetition_penalty": (lambda v: v > 0, "> 0 (1 = none)"),
    }
    for name, (ok, expected) in ranges.items():
        value = getattr(args, name)
        if value is not None and not ok(value):
            raise usage(f"{_flag(name)} must be {expected}, got {value:g}")
    try:
        limits.check_values(vars(args), prefix="--")  # inf and NaN (limits.py)
    except ValueError as err:
        raise usage(str(err)) from None
    beams = args.num_beams is not None and args.num_beams > 1
    if args.greedy and args.sample:
        raise usage("--greedy and --sample contradict: drop one")
    for mode, on in (("--greedy", args.greedy), ("--sample", args.sample)):
        if on and beams:
            raise usage(
                f"{mode} and --num-beams {args.num_beams} contradict: "
                + ("greedy is one beam; drop one" if mode == "--greedy" else "beam sampling is not implemented")
            )
    sampling = [(n, getattr(args, n)) for n in SAMPLING if getattr(args, n) is not None]
    for mode, on in (("--greedy", args.greedy), (f"--num-beams {args.num_beams}", beams)):
        if on and sampling:
            name, value = sampling[0]
            raise usage(f"{mode} and {_flag(name)} {value:g} contradict: {_flag(name)} only shapes sampling; drop one")
    if args.stream and args.format == "json":
        raise usage("--stream and --format json contradict: JSON is printed once, at the end")


def _prompts(args: argparse.Namespace, usage: Usage) -> list[str]:
    if args.prompt is not None:
        return [args.prompt]
    path = Path(args.prompts_file)
    if not path.is_file():
        raise usage(f"--prompts-file {str(path)!r} does not exist")
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as err:
        raise usage(f"--prompts-file {str(path)!r} is not UTF-8 text: {err.reason} at byte {err.start}") from None
    prompts = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        if line.startswith('"'):
            try:
                line = json.loads(line)
            except json.JSONDecodeError as err:
                raise usage(
                    f"--prompts-file line {number} starts with '\"' but is not a JSON string: {err.msg}"
                ) from None
        prompts.append(line)
    if not prompts:
        raise usage(f"--prompts-file {str(path)!r} holds no prompt (every line is blank)")
    return prompts


def check_sizes(args: argparse.Namespace, usage: Usage, config: ModelConfig, rows: int, width: int) -> None:
    """``rows`` outputs (prompts x --num-return-sequences) of a ``width``-token prompt: every row's seed is one a
    generator takes, and their KV cache (at most one window of ``max_seq_len``), the per-row generators and the
    tokens kept must fit in memory; refused before any of them is made (10**7 rows once ended in
    ``std::bad_alloc``; ``--max-new-tokens 10**30`` ran on forever)."""
    try:
        limits.check_seed(args.seed, rows)
    except ValueError as err:
        raise usage(str(err)) from None
    flags = "--max-new-tokens, --num-return-sequences or the number of prompts"
    if rows > 1:
        from anatomy.sizes import check_cache_fits

        check_cache_fits(config, rows, min(width + args.max_new_tokens, config.max_seq_len), flags=flags)
    limits.check_output_fits(rows, width + args.max_new_tokens, flags=flags, per_row=limits.GENERATOR_BYTES)
