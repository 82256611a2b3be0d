"""``anatomy trace my_gpt.py:GPT``: the shape table of a learner's whole language model (``--kind lm``, or found
when the class is built as a model: ``CLASS(vocab_size, d_model, n_heads, n_layers, block_size)``, ``CLASS(config)``
or ``--factory``, by the doctor's ``doctor/model/build.py``). ``anatomy.doctor.trace.model_trace`` makes the table;
``cli/trace.py`` sends the learner's file here first. Exit codes as for a module: 0 printed, 1 a block leaves the
post's flow, 2 bad usage or a model that could not be built, run or followed."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any, Protocol


def wants_model(args: argparse.Namespace) -> bool:
    """``--kind lm``; with ``--kind auto`` (the default), a target whose constructor reads as a model's (the doctor's
    ``doctor/model/dispatch.py``, from the file's text: the file is not run twice)."""
    kind = getattr(args, "kind", "auto")
    if kind != "auto":
        return bool(kind == "lm")  # module, attention, block: the module trace
    from anatomy.doctor.model.dispatch import is_model_target

    target = args.target if args.factory is None or ":" in args.target else f"{args.target}:{args.factory}"
    return is_model_target(target, args.factory)


def run_model(args: argparse.Namespace) -> int | None:
    """Print the model's table; ``None`` when, found by ``--kind auto``, the target is not a model after all (no
    token embedding in it): the module trace takes over."""
    from anatomy.doctor.trace.model_trace import ModelSizes, NotAModel, trace_model

    if args.preset is not None or args.checkpoint is not None:
        raise ValueError("give FILE.py:CLASS or --preset/--checkpoint, not both")
    if args.timeout < 0:
        raise ValueError(f"--timeout must be a number of seconds >= 0, got {args.timeout:g}")
    for flag in ("kv_heads", "head_dim", "d_ff", "positional", "norm", "norm_position", "activation", "architecture"):
        if getattr(args, flag) is not None:
            raise ValueError(
                f"--{flag.replace('_', '-')} applies to --preset models; your model takes --vocab, --d-model, "
                "--heads, --layers, --batch, --seq"
            )
    if args.tgt_seq is not None:
        raise ValueError("--tgt-seq applies to --preset seq2seq models; your model takes --seq")
    seq = args.seq or 7
    values = {
        "vocab": args.vocab or 29,
        "d-model": args.d_model or 20,
        "heads": args.heads or 5,
        "layers": args.layers or 3,
        "batch": args.batch,
        "seq": seq,
    }
    for name, value in values.items():
        if value <= 0:
            raise ValueError(f"--{name} must be a positive integer, got {value}")
    if values["d-model"] % values["heads"]:
        raise ValueError(f"--d-model {values['d-model']} must be divisible by --heads {values['heads']}")
    sizes = ModelSizes(
        vocab_size=values["vocab"],
        d_model=values["d-model"],
        n_heads=values["heads"],
        n_layers=values["layers"],
        block_size=max(11, seq + 4),
        batch=args.batch,
        seq=seq,
    )
    target = args.target if args.factory is None or ":" in args.target else f"{args.target}:{args.factory}"
    chosen = (
        any(getattr(args, f) is not None for f in ("vocab", "d_model", "heads", "layers", "seq")) or args.batch != 2
    )
    try:
        return print_trace(
            args,
            lambda: trace_model(target, factory=args.factory, sizes=sizes if chosen else None, timeout=args.timeout),
            passes=(NotAModel,),
        )
    except NotAModel as err:
        if getattr(args, "kind", "auto") == "auto":
            return None
        print(f"anatomy trace: error: {err}", file=sys.stderr)
        return 2


class _Trace(Protocol):
    @property
    def deviation(self) -> dict[str, Any] | None: ...

    def render(self, fmt: str = ..., lang: str = ...) -> str: ...


def print_trace(args: argparse.Namespace, make: Callable[[], _Trace], passes: tuple[type[Exception], ...] = ()) -> int:
    """Run ``make`` under the watchdog and print its table: exit 1 when a row leaves the post's flow, 2 with one
    line when the module cannot be traced (errors in ``passes`` are raised for the caller)."""
    from anatomy.cli.check import _overdue
    from anatomy.doctor import CheckError, CheckTimeout
    from anatomy.doctor.loading.limits import Watchdog

    try:
        with Watchdog(_overdue(args.lang)):
            trace = make()
    except CheckTimeout as err:
        print(f"anatomy trace: error: {err.zh if args.lang == 'zh' else err.en}", file=sys.stderr)
        return 2
    except CheckError as err:
        if isinstance(err, passes):
            raise
        print(f"anatomy trace: error: {err}", file=sys.stderr)
        return 2
    print(trace.render(args.format, lang=args.lang))
    return 1 if trace.deviation is not None else 0
