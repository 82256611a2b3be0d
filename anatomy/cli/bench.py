"""``anatomy bench``: attention, train-step, decode and memory comparisons against every installed peer.

anatomy bench                                  # full sizes (a few minutes on 2 cores)
anatomy bench --quick --out bench.json         # tiny sizes, seconds; the JSON holds every number
anatomy bench --only attention decode --threads 1 --rounds 7
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from anatomy.bench.suites import SUITES


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = (
        "Run every speed and memory comparison against the installed peers (torch.nn, HF transformers, "
        "x-transformers; a missing one is named with its pip line) in interleaved rounds; print min / median / max "
        "per contender and the ratio of its printed median to ours' (above 1: ours is faster or smaller), warn "
        "when the load average says the machine was busy, and optionally write JSON."
    )
    p.add_argument("--quick", action="store_true", help="tiny sizes (seconds): checks that everything runs")
    p.add_argument(
        "--only",
        nargs="+",
        choices=list(SUITES),
        metavar="SUITE",
        help=f"run only these suites ({', '.join(SUITES)}); default all",
    )
    p.add_argument("--rounds", type=int, default=None, help="interleaved rounds (default 5; --quick 3)")
    p.add_argument("--repeat", type=int, default=None, help="calls per contender per round, best kept (default 2)")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    p.add_argument("--out", default=None, metavar="FILE.json", help="also write the report as JSON")
    p.add_argument("--force", action="store_true", help="replace --out if it exists")


MAX_ROUNDS = 1000


def run(args: argparse.Namespace) -> int:
    import torch

    from anatomy.bench import format_report, run_bench, write_json
    from anatomy.bench.timing import keep_freed_memory_mapped
    from anatomy.cli.usage import UsageError

    cores = os.cpu_count() or 1
    # --threads 10**22 once ended in torch's "Overflow when unpacking long long", 100000 in a segfault at exit;
    # rounds and calls past a thousand only make the run endless (a median of 1000 rounds is already stable)
    for name, most, why in (
        ("rounds", MAX_ROUNDS, "rounds"),
        ("repeat", MAX_ROUNDS, "calls per round"),
        ("threads", cores, f"the {cores} cores here"),
    ):
        value = getattr(args, name)
        if value is not None and not 1 <= value <= most:
            raise UsageError(f"--{name} must be an integer from 1 to {most} ({why}), got {value}")
    out = None
    if args.out is not None:
        out = Path(args.out)
        if out.suffix.lower() != ".json":
            raise UsageError(f"--out must end in .json, got {args.out!r}")
        if out.is_dir() or (out.exists() and not args.force):
            raise UsageError(f"--out {args.out} exists; give a new path or --force to replace it")
        if not out.parent.is_dir():
            raise UsageError(f"--out {args.out}: the folder {out.parent} does not exist")
    if args.threads:
        torch.set_num_threads(args.threads)
    # the quick run happens inside test processes too: leave their allocator alone
    allocator = "default (quick run)" if args.quick else keep_freed_memory_mapped()
    report = run_bench(
        quick=args.quick,
        suites=args.only,
        n_rounds=args.rounds,
        repeat=args.repeat,
        allocator=allocator,
        progress=lambda name: print(f"running {name} ...", file=sys.stderr, flush=True),
    )
    print(format_report(report))
    if out is not None:
        write_json(report, out, overwrite=args.force)
        print(f"wrote {out}")
    return 0
