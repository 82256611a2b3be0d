"""``anatomy``: the command table. Each command is a small function over the library.

Exit codes: 0 success, 1 a finding or failure, 2 bad usage (with a one-line reason naming the argument).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from anatomy.cli import trace as trace_cmd


class UsageError(Exception):
    """Bad input from the command line: printed as one line, exit code 2."""


COMMANDS: dict[str, tuple[Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int], str]] = {
    "trace": (trace_cmd.add_arguments, trace_cmd.run, "the post's shape table, from a real forward pass"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="anatomy", description="transformer-anatomy: see, verify and use the Transformer's core components.")
    from anatomy import __version__

    parser.add_argument("--version", action="version", version=f"anatomy {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (add_arguments, _, help_text) in COMMANDS.items():
        add_arguments(sub.add_parser(name, help=help_text, description=help_text))
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        return COMMANDS[args.command][1](args)
    except (UsageError, ValueError, TypeError) as err:
        print(f"anatomy {args.command}: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
