"""``anatomy claims list|run`` and ``anatomy report`` (the main job: every claim at the quick preset)."""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from anatomy.experiments.registry import CLAIM_PRESETS

_T = TypeVar("_T")


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    sub.add_parser("list", help="list every claim with its section and experiment")
    run = sub.add_parser("run", help="run claims and write claims.json, figures and the reports")
    run.add_argument("ids", nargs="*", help="claim ids or numbers (C20-mask-fill, C20, 20)")
    run.add_argument("--all", action="store_true", help="run every claim")
    run.add_argument("--preset", choices=CLAIM_PRESETS, default="quick")
    run.add_argument("--seeds", type=int, default=None, help="seeds per experiment (default: 1 smoke, 3 quick/full)")
    run.add_argument("--out", default="claims-out", help="output directory (default claims-out)")
    run.add_argument("--quiet", action="store_true", help="no progress bars")
    _jobs_argument(run)
    merge = sub.add_parser("merge", help="combine runs made in parallel into one report")
    merge.add_argument("sources", nargs="+", help="output directories of `anatomy claims run`")
    merge.add_argument("--out", required=True, help="directory for the merged claims.json and reports")


def run(args: argparse.Namespace) -> int:
    from anatomy.experiments.registry import CLAIMS
    from anatomy.experiments.runner import run_claims, select

    if args.action == "list":
        for cid in select(None):
            c = CLAIMS[cid]
            print(f"{cid:<42} {c.section:<6} {c.experiment:<28} {c.statement_en}")
        print(f"\n{len(CLAIMS)} claims")
        return 0
    if args.action == "merge":
        from anatomy.experiments.report import merge

        _check_out(args.out)
        _summary(merge(args.sources, args.out), args.out)
        return 0
    if not args.ids and not args.all:
        raise ValueError("give claim ids (e.g. C20 C29) or --all")
    if args.ids and args.all:
        raise ValueError("give claim ids or --all, not both")
    ids = None if args.all else args.ids
    if args.dry_run:
        return _dry_run(ids, args)
    running = _running(args)  # refused here, before the output folder is made
    _check_out(args.out)
    doc = _guarded(
        lambda: run_claims(ids, preset=args.preset, seeds=args.seeds, out=args.out, progress=not args.quiet, **running),
        "claims",  # as main() names the command in its errors
    )
    if doc is None:
        return 1
    _summary(doc, args.out)
    return 0


def add_report_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", default="report", help="output directory (default ./report)")
    p.add_argument(
        "--preset",
        choices=CLAIM_PRESETS,
        default="quick",
        help="default quick (about 2 minutes on 2 cores with --jobs 2, 4 minutes with --jobs 1)",
    )
    p.add_argument("--seeds", type=int, default=None)
    p.add_argument("--quiet", action="store_true")
    _jobs_argument(p)


def _jobs_argument(p: argparse.ArgumentParser) -> None:
    where = p.add_mutually_exclusive_group()
    where.add_argument(
        "--jobs",
        type=int,
        default=None,
        metavar="N",
        help="processes (this one and N-1 workers), one experiment run (one seed) each at a time, "
        "one thread each (default: one per core; 1: one after the other in this process). "
        "Same numbers either way",
    )
    where.add_argument(
        "--cluster",
        default=None,
        metavar="ADDRESS",
        help="run every unit (one experiment, one seed) as a task on the Ray cluster at ADDRESS "
        "(HOST:PORT of its head, or auto for RAY_ADDRESS / the running cluster); needs the "
        "[cluster] extra. Same numbers as a local run",
    )
    p.add_argument(
        "--cluster-cpus", type=float, default=1.0, metavar="N", help="CPUs each unit asks of the cluster (default 1)"
    )
    p.add_argument(
        "--device",
        default="cpu",
        metavar="DEVICE",
        help="where the experiments compute: cpu (default) or cuda[:N] (a GPU; with --cluster each unit "
        "asks the cluster for one). Data and initial weights are drawn on the CPU either way",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="keep the units already finished in --out (same preset, seeds, claims and code) and run "
        "only the missing ones",
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="print the plan (units, estimated CPU-hours per experiment) and run nothing",
    )


MAX_SEEDS = 1000  # each seed runs every experiment again: 1000 is already thousands of CPU-hours at the quick preset


def _check_numbers(args: argparse.Namespace) -> None:
    """``--seeds`` and ``--cluster-cpus`` in range, for a run and a dry run alike (``--seeds 10**22`` once built
    its plan until memory ran out; ``--cluster-cpus nan`` passed)."""
    if args.seeds is not None and not 1 <= args.seeds <= MAX_SEEDS:
        raise ValueError(f"--seeds must be an integer from 1 to {MAX_SEEDS} (seeds per experiment), got {args.seeds}")
    if not (math.isfinite(args.cluster_cpus) and args.cluster_cpus > 0):
        raise ValueError(f"--cluster-cpus must be positive (CPUs per unit), got {args.cluster_cpus:g}")


def _running(args: argparse.Namespace) -> dict[str, Any]:
    """The running options of ``claims run`` and ``report`` as keywords of ``run_claims``."""
    _check_numbers(args)
    return dict(
        jobs=_jobs(args), resume=args.resume, cluster=args.cluster, cluster_cpus=args.cluster_cpus, device=_device(args)
    )


def _device(args: argparse.Namespace) -> str:
    """``--device``, checked before anything starts: a name the lab knows, available here (or, with ``--cluster``,
    asked of the cluster once connected)."""
    from anatomy.experiments.devices import check_device
    from anatomy.experiments.runner import cluster_device

    return cluster_device(args.device) if args.cluster else check_device(args.device)


def _jobs(args: argparse.Namespace) -> int | None:
    if args.jobs is not None and args.jobs < 1:
        raise ValueError(f"--jobs must be a positive integer (worker processes), got {args.jobs}")
    jobs: int | None = args.jobs
    return jobs


def run_report(args: argparse.Namespace) -> int:
    from anatomy.experiments.runner import run_claims

    if args.dry_run:
        return _dry_run(None, args)
    running = _running(args)  # refused here, before the output folder is made
    _check_out(args.out)
    t0 = time.perf_counter()
    doc = _guarded(
        lambda: run_claims(
            None, preset=args.preset, seeds=args.seeds, out=args.out, progress=not args.quiet, **running
        ),
        "report",
    )
    if doc is None:
        return 1
    _summary(doc, args.out)
    print(f"wall time {time.perf_counter() - t0:.0f} s · open {Path(args.out) / 'index.html'}")
    return 0


def _guarded(run: Callable[[], _T], command: str) -> _T | None:
    """``run()``, or ``None`` after one line on stderr when a worker process died (exit code 1)."""
    import sys

    from anatomy.experiments.cluster import ClusterError
    from anatomy.experiments.runner import WorkerDied

    try:
        return run()
    except (WorkerDied, ClusterError) as err:
        print(f"anatomy {command}: error: {err}", file=sys.stderr, flush=True)
        if getattr(err, "fatal", False):  # Ray's connection is broken: its shutdown at exit would wait and log
            import os

            sys.stdout.flush()
            os._exit(1)
        return None


def _dry_run(ids: list[str] | None, args: argparse.Namespace) -> int:
    from anatomy.experiments.estimate import dry_run

    _check_numbers(args)

    print(
        dry_run(
            ids,
            preset=args.preset,
            seeds=args.seeds,
            cluster=args.cluster,
            cluster_cpus=args.cluster_cpus,
            jobs=_jobs(args),
            device=_device(args),
        )
    )
    return 0


def _check_out(out: str) -> None:
    path = Path(out)
    if path.exists() and not path.is_dir():
        raise ValueError(f"--out {out} exists and is not a directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / ".write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as err:
        raise ValueError(f"--out {out} is not writable ({err.strerror})") from None


def _summary(doc: dict[str, Any], out: str) -> None:
    from collections import Counter

    counts = Counter(c["verdict"] for c in doc["claims"])
    print(f"{len(doc['claims'])} claims · " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    odd = [c["id"].split("-")[0] for c in doc["claims"] if c.get("nondeterministic")]
    if odd:
        print(f"not reproducible bit for bit (wall-clock timings, see claims.json): {', '.join(odd)}")
    print(f"wrote {Path(out) / 'claims.json'}, report.md, report.zh.md, index.html")
