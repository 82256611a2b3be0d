"""``anatomy check FILE.py:CLASS``: which of the post's pitfalls does your attention or block have?

Exit codes: 0 no error (warnings are printed), 1 errors (or warnings with ``--strict``), 2 the module could not be
loaded, built or called, did not finish within ``--timeout``, or ended the process itself (``sys.exit``,
``os._exit``): one line on stderr saying what was expected or which step hung. See docs/doctor.md.

The check runs in a forked child process where the system has ``fork`` (``doctor/loading/child.py``): a
learner's ``os._exit(0)`` (which no ``except`` can catch) then ends the child, and the parent says so instead of
exiting 0 with no output; what the learner's code writes to file descriptors 1 and 2 is dropped, and processes it
leaves behind are ended, never waited for.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from anatomy.doctor import CheckError, CheckTimeout, check
from anatomy.doctor.check import TIMEOUT
from anatomy.doctor.loading.child import FORK, forked
from anatomy.doctor.loading.limits import Step, Watchdog, grace
from anatomy.doctor.report.short import short_answer


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "target",
        metavar="FILE.py:CLASS",
        help="your module: built as CLASS(d_model, n_heads), called as forward(x) or forward(x, mask)",
    )
    p.add_argument(
        "--kind",
        choices=("auto", "attention", "block", "lm"),
        default="auto",
        help="attention, a whole block, or a whole language model (auto: a model when built as one and forward(ids) "
        "returns logits; a block when it holds a norm outside its attention)",
    )
    p.add_argument("--d-model", type=int, default=16, help="d_model passed to your constructor (default 16)")
    p.add_argument("--heads", type=int, default=4, help="n_heads passed to your constructor (default 4)")
    p.add_argument("--vocab-size", type=int, help="a language model's vocab_size (default 29)")
    p.add_argument("--layers", type=int, help="a language model's n_layers (default 3)")
    p.add_argument("--block-size", type=int, help="a language model's block_size, its longest input (default 12)")
    p.add_argument("--causal", action="store_true", help="your module masks the future itself (a decoder)")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.add_argument("--lang", choices=("en", "zh"), default="en", help="language of the text report")
    p.add_argument("--strict", action="store_true", help="exit 1 on warnings too")
    p.add_argument(
        "--details",
        action="store_true",
        help="the full report (every probe, finding and number) instead of the short answer",
    )
    p.add_argument(
        "--factory",
        metavar="FUNC",
        help="build with FUNC(d_model, n_heads) (a model: FUNC() or FUNC(vocab_size, ...)) from the same file instead",
    )
    p.add_argument(
        "--map",
        metavar="JSON",
        help="reference name → your parameter, inline or a .json file: "
        '\'{"q_proj.weight": "attn.Wq.T"}\' (.T transposes)',
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the random weights and inputs (default 0)")
    p.add_argument(
        "--seq-first",
        action="store_true",
        help="your module takes and returns (T, B, D) (default: detected from batch independence)",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=TIMEOUT,
        metavar="SECONDS",
        help=f"time limit for importing the file, building the module and each forward (default {TIMEOUT:g}; 0: none)",
    )


def _load_map(value: str | None) -> dict[str, Any] | None:
    if value is None:
        return None
    text = value if value.lstrip().startswith("{") else None
    if text is None:
        try:
            text = Path(value).read_text(encoding="utf-8")
        except OSError as err:
            raise CheckError(f"--map: cannot read {value!r}: {err.strerror}") from None
    try:
        mapping = json.loads(text)
    except json.JSONDecodeError as err:
        raise CheckError(f"--map: not valid JSON ({err.msg} at line {err.lineno}, column {err.colno})") from None
    except RecursionError:
        raise CheckError("--map: nested too deeply to be a mapping; expected a JSON object") from None
    if not isinstance(mapping, dict):
        raise CheckError("--map must be a JSON object {reference parameter: your parameter}")
    return mapping


def terminal_width() -> int:
    """The report wraps to the terminal, between 60 and 100 columns (80 when it is not a terminal)."""
    return max(60, min(100, shutil.get_terminal_size((80, 24)).columns))


def _overdue_line(step: Step, lang: str) -> str:
    """The watchdog's word: the alarm could not stop the step (C code that never returns, or a module that
    swallows every alarm), so the check was ended, exit code 2, with the same line as a timeout."""
    en, zh = step.describe()
    err = CheckTimeout(en, zh, step.limit)
    late = grace(step.limit)
    extra = (
        f" (still running {late:g} s after the limit: the process was ended)"
        if lang == "en"
        else f"（超过时限 {late:g} 秒后仍在运行：进程已被终止）"
    )
    return f"anatomy check: error: {err.zh if lang == 'zh' else err.en}{extra}\n"


def _overdue(lang: str) -> Callable[[Step], None]:
    """Without ``fork``: the watchdog says so and ends this process."""

    def end(step: Step) -> None:
        sys.stderr.write(_overdue_line(step, lang))
        sys.stderr.flush()
        os._exit(2)

    return end


def _compute(args: argparse.Namespace) -> tuple[int, str, str]:
    """(exit code, stdout text, stderr text) of one check."""
    try:
        report = check(
            args.target,
            kind=args.kind,
            d_model=args.d_model,
            n_heads=args.heads,
            causal=args.causal,
            factory=args.factory,
            mapping=_load_map(args.map),
            seed=args.seed,
            timeout=args.timeout,
            seq_first=True if getattr(args, "seq_first", False) else None,
            vocab_size=getattr(args, "vocab_size", None),
            n_layers=getattr(args, "layers", None),
            block_size=getattr(args, "block_size", None),
        )
    except CheckError as err:  # a timeout, a module that exits, one that cannot be loaded, built or called
        text = getattr(err, "zh", None) if args.lang == "zh" else getattr(err, "en", None)
        return 2, "", f"anatomy check: error: {text or err}\n"
    if args.format == "json":
        return report.exit_code(strict=args.strict), report.to_json(strict=args.strict) + "\n", ""
    if getattr(args, "details", False):
        text = report.render(lang=args.lang, width=terminal_width(), strict=args.strict)
    else:  # the short answer first (report/short.py); the full report behind --details
        text = "\n".join(short_answer(report, lang=args.lang, width=terminal_width(), strict=args.strict))
    return report.exit_code(strict=args.strict), text + "\n", ""


def _ended(args: argparse.Namespace, code: int) -> str:
    if args.lang == "zh":
        return (
            f"anatomy check: error: {args.target}：检查结束前，模块自己结束了进程（os._exit({code}) 或一个信号），"
            "因此什么也没能检查；请删掉这个退出（调试时留下的？）\n"
        )
    return (
        f"anatomy check: error: {args.target}: the module ended the process itself (os._exit({code}) or a "
        "signal) before the check finished, so nothing was checked; remove the exit (a debugging leftover?)\n"
    )


def _forked(args: argparse.Namespace) -> tuple[int, str, str]:
    """:func:`_compute` in a child process; a child that ends without an answer is a module that ended it."""
    outcome = forked(lambda: _compute(args), overdue=lambda step: (2, "", _overdue_line(step, args.lang)))
    if outcome.answered:
        answer: tuple[int, str, str] = outcome.answer
        return answer
    if outcome.crash is not None:
        return 2, "", f"anatomy check: error: {outcome.crash}\n"
    return 2, "", _ended(args, outcome.code)


def _here(args: argparse.Namespace) -> tuple[int, str, str]:
    with Watchdog(_overdue(args.lang)):
        return _compute(args)


def run(args: argparse.Namespace) -> int:
    try:
        _load_map(args.map)  # a bad --map is the user's error: said here, before anything runs
    except CheckError as err:
        print(f"anatomy check: error: {err}", file=sys.stderr)
        return 2
    code, out, said = _forked(args) if FORK else _here(args)
    sys.stdout.write(out)
    sys.stderr.write(said)
    return code
