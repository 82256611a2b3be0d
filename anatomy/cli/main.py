"""``anatomy``: the command table. Each command is a small function over the library.

Exit codes: 0 success, 1 a finding or failure, 2 bad usage (with a one-line reason naming the argument), 130
interrupted (Ctrl-C). Errors of the operating system (no space, read-only, permission, a file where a folder is
expected), running out of memory and Ctrl-C come out as one line naming the path and what to do, never a traceback
(``report_os_error``; docs/cli.md).
"""

from __future__ import annotations

import argparse
import errno
import os
import sys
from collections.abc import Callable

from anatomy.cli import bench as bench_cmd
from anatomy.cli import check as check_cmd
from anatomy.cli import claims as claims_cmd
from anatomy.cli import convert as convert_cmd
from anatomy.cli import evaluate as evaluate_cmd
from anatomy.cli import generate as generate_cmd
from anatomy.cli import learn as learn_cmd
from anatomy.cli import predict as predict_cmd
from anatomy.cli import trace as trace_cmd
from anatomy.cli import train as train_cmd
from anatomy.cli import viz as viz_cmd
from anatomy.cli.usage import UsageError

__all__ = ["COMMANDS", "UsageError", "build_parser", "main", "parse", "report_os_error"]


COMMANDS: dict[str, tuple[Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int], str]] = {
    "report": (
        claims_cmd.add_report_arguments,
        claims_cmd.run_report,
        "the main job: run every claim of the post (quick preset) and write a browsable report",
    ),
    "claims": (claims_cmd.add_arguments, claims_cmd.run, "list or run the claims of the post, one by one"),
    "trace": (trace_cmd.add_arguments, trace_cmd.run, "the post's shape table, from a real forward pass"),
    "check": (
        check_cmd.add_arguments,
        check_cmd.run,
        "the doctor: which of the post's pitfalls does your own attention or block have?",
    ),
    "convert": (
        convert_cmd.add_arguments,
        convert_cmd.run,
        "Hugging Face directory <-> anatomy checkpoint; --verify prints the layer-by-layer error budget",
    ),
    "viz": (viz_cmd.add_arguments, viz_cmd.run, "pictures: attention maps, positional encodings, masks, a page"),
    "train": (train_cmd.add_arguments, train_cmd.run, "train a model from a preset and key=value words; --resume"),
    "evaluate": (
        evaluate_cmd.add_arguments,
        evaluate_cmd.run,
        "a trained checkpoint's loss (perplexity, accuracy) on its run's val or test split",
    ),
    "generate": (
        generate_cmd.add_generate_arguments,
        generate_cmd.run_generate,
        "continue a prompt with a trained language or seq2seq model",
    ),
    "predict": (
        predict_cmd.add_predict_arguments,
        predict_cmd.run_predict,
        "label probabilities of a trained classifier",
    ),
    "bench": (bench_cmd.add_arguments, bench_cmd.run, "speed and memory against every installed peer, in one run"),
    "learn": (
        learn_cmd.add_arguments,
        learn_cmd.run,
        "the course: write each piece of the post yourself and be told which pitfall you hit, and where",
    ),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="anatomy", description="transformer-anatomy: see, verify and use the Transformer's core components."
    )
    from anatomy import __version__

    parser.add_argument("--version", action="version", version=f"anatomy {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (add_arguments, _, help_text) in COMMANDS.items():
        add_arguments(sub.add_parser(name, help=help_text, description=help_text))
    return parser


WORD_LISTS = ("words", "overrides", "ids")  # the free-word positionals (nargs="*") of train, viz and claims


def parse(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """``parse_args``, except that a command's free words may also come after its options
    (``anatomy train --preset char-tang --out runs/a steps=500``): argparse fills an ``nargs="*"`` positional from
    one stretch of words only and calls the rest unrecognized."""
    args, extras = parser.parse_known_args(argv)
    lists = [name for name in WORD_LISTS if isinstance(getattr(args, name, None), list)]
    if extras and lists and not any(word.startswith("-") for word in extras):
        getattr(args, lists[0]).extend(extras)
    elif extras:
        parser.error(f"unrecognized arguments: {' '.join(extras)}")
    return args


_OS_ADVICE = {
    errno.ENOSPC: "no space left on the device holding {path}: free some space or choose a folder on another disk",
    errno.EDQUOT: "disk quota exceeded writing {path}: free some space or choose a folder on another disk",
    errno.EROFS: "{path} is on a read-only file system: choose a writable folder",
    errno.EACCES: "permission denied for {path}: choose a folder you may write, or change its permissions",
    errno.EPERM: "operation not permitted on {path}: choose a folder you may write, or change its permissions",
    errno.ENOTDIR: "{path}: a part of this path is a file, not a folder: choose another path",
    errno.EEXIST: "{path} already exists: choose another path",
    errno.EISDIR: "{path} is a folder where a file was expected",
    errno.ENOENT: "{path} does not exist",
}


def report_os_error(err: OSError, args: argparse.Namespace) -> str:
    """One line for an ``OSError``: what happened to which path, and what to do."""
    path = repr(str(err.filename)) if err.filename else "the output folder"
    line = _OS_ADVICE.get(err.errno or -1, "{path}: " + (err.strerror or str(err))).format(path=path)
    run = getattr(args, "resume", None) or getattr(args, "out", None)
    if args.command == "train" and run and err.errno not in (errno.ENOTDIR, errno.EEXIST, errno.ENOENT):
        line += f"; the checkpoints saved so far are complete: continue with `anatomy train --resume {run}`"
    return line


def _out_of_memory(err: BaseException) -> bool:
    return isinstance(err, MemoryError) or type(err).__name__ == "OutOfMemoryError"  # torch.OutOfMemoryError


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parse(parser, argv)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        return COMMANDS[args.command][1](args)
    except (UsageError, ValueError, TypeError) as err:
        print(f"anatomy {args.command}: error: {err}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `anatomy claims list | head`: the reader has gone; stop quietly, like SIGPIPE would
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # the interpreter flushes stdout at exit: not into the closed pipe
        return 128 + 13
    except OSError as err:
        print(f"anatomy {args.command}: error: {report_os_error(err, args)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        run = getattr(args, "resume", None) or getattr(args, "out", None)
        hint = (
            f"; the checkpoints saved so far are complete: continue with `anatomy train --resume {run}`"
            if args.command == "train" and run
            else ""
        )
        print(f"\nanatomy {args.command}: interrupted{hint}", file=sys.stderr)
        return 130
    except (MemoryError, RuntimeError) as err:
        if not _out_of_memory(err):
            raise
        print(
            f"anatomy {args.command}: error: out of memory ({type(err).__name__}); the sizes asked for do not fit "
            "here: use smaller sizes (batch, sequence length, model width) or a machine with more memory",
            file=sys.stderr,
        )
        return 1


if __name__ == "__main__":
    sys.exit(main())
