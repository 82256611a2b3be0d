"""``anatomy check FILE.py:CLASS``: which of the post's pitfalls does your attention or block have?

Exit codes: 0 no error (warnings are printed), 1 errors (or warnings with ``--strict``), 2 the module could not be
loaded, built or called, or did not finish within ``--timeout`` (one line on stderr saying what was expected or
which step hung). See docs/doctor.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

from anatomy.doctor import CheckError, CheckTimeout, check
from anatomy.doctor.check import TIMEOUT
from anatomy.doctor.limits import Step, Watchdog, grace


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("target", metavar="FILE.py:CLASS",
                   help="your module: built as CLASS(d_model, n_heads), called as forward(x) or forward(x, mask)")
    p.add_argument("--kind", choices=("auto", "attention", "block"), default="auto",
                   help="attention or a whole block (auto: a block when it holds a norm outside its attention)")
    p.add_argument("--d-model", type=int, default=16, help="d_model passed to your constructor (default 16)")
    p.add_argument("--heads", type=int, default=4, help="n_heads passed to your constructor (default 4)")
    p.add_argument("--causal", action="store_true", help="your module masks the future itself (a decoder)")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.add_argument("--lang", choices=("en", "zh"), default="en", help="language of the text report")
    p.add_argument("--strict", action="store_true", help="exit 1 on warnings too")
    p.add_argument("--factory", metavar="FUNC", help="build with FUNC(d_model, n_heads) from the same file instead")
    p.add_argument("--map", metavar="JSON", help='reference name → your parameter, inline or a .json file: '
                                                 '\'{"q_proj.weight": "attn.Wq.T"}\' (.T transposes)')
    p.add_argument("--seed", type=int, default=0, help="seed of the random weights and inputs (default 0)")
    p.add_argument("--timeout", type=float, default=TIMEOUT, metavar="SECONDS",
                   help=f"time limit for importing the file, building the module and each forward (default "
                        f"{TIMEOUT:g}; 0: none)")


def _load_map(value: str | None) -> dict | None:
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
    if not isinstance(mapping, dict):
        raise CheckError("--map must be a JSON object {reference parameter: your parameter}")
    return mapping


def terminal_width() -> int:
    """The report wraps to the terminal, between 60 and 100 columns (80 when it is not a terminal)."""
    return max(60, min(100, shutil.get_terminal_size((80, 24)).columns))


def _overdue(lang: str):
    """The watchdog's last word: the alarm could not stop the step (C code that never returns, or a module that
    swallows every alarm), so the process ends here, exit code 2, with the same line as a timeout."""
    def end(step: Step) -> None:
        en, zh = step.describe()
        err = CheckTimeout(en, zh, step.limit)
        late = grace(step.limit)
        extra = (f" (still running {late:g} s after the limit: the process was ended)" if lang == "en"
                 else f"（超过时限 {late:g} 秒后仍在运行：进程已被终止）")
        sys.stderr.write(f"anatomy check: error: {err.zh if lang == 'zh' else err.en}{extra}\n")
        sys.stderr.flush()
        os._exit(2)
    return end


def run(args: argparse.Namespace) -> int:
    try:
        with Watchdog(_overdue(args.lang)):
            report = check(args.target, kind=args.kind, d_model=args.d_model, n_heads=args.heads,
                           causal=args.causal, factory=args.factory, mapping=_load_map(args.map), seed=args.seed,
                           timeout=args.timeout)
    except CheckTimeout as err:
        print(f"anatomy check: error: {err.zh if args.lang == 'zh' else err.en}", file=sys.stderr)
        return 2
    except CheckError as err:
        print(f"anatomy check: error: {err}", file=sys.stderr)
        return 2
    if args.format == "json":
        print(report.to_json(strict=args.strict))
    else:
        print(report.render(lang=args.lang, width=terminal_width(), strict=args.strict))
    return report.exit_code(strict=args.strict)
