"""Run claims: each experiment once per seed, metrics aggregated, each claim's declared rule applied.

The unit of work is one experiment on one seed. Claims that share an experiment share its runs: it trains once
per seed, whatever the number of claims reading its metrics. With ``jobs > 1`` the runs are spread over this
process and ``jobs - 1`` worker processes (one intra-op thread each), the longest first, and one progress bar with
an ETA follows them all; with ``jobs=1`` they run one after the other in this process. ``claims.json`` says where
the wall time went (``schedule``: each worker's busy, start-up and tail seconds).

Every run starts from ``seed_everything(seed)`` in a process with one intra-op thread, so a metric does not
depend on where or in which order it ran: serial and parallel runs give bit-equal numbers, except the metrics
listed in :data:`NONDETERMINISTIC` (wall-clock timings), which ``claims.json`` names per claim with the reason.

The local worker pool is :mod:`anatomy.experiments.workers`, a Ray cluster :mod:`anatomy.experiments.cluster`, the
document written :mod:`anatomy.experiments.document`, the stored units :mod:`anatomy.experiments.store`.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from anatomy.experiments.devices import check_device, is_cuda
from anatomy.experiments.document import NONDETERMINISTIC, Done, nondeterministic_metrics, schedule
from anatomy.experiments.document import document as _document
from anatomy.experiments.registry import CLAIM_PRESETS, CLAIMS, DEFAULT_SEEDS, claim_number
from anatomy.experiments.store import Result, Run, Store, Unit
from anatomy.experiments.units import load_all
from anatomy.experiments.workers import WorkerDied
from anatomy.experiments.workers import run_pool as _run_pool
from anatomy.experiments.workers import run_timed as _run_timed

__all__ = [
    "COST_HINTS",
    "NONDETERMINISTIC",
    "WorkerDied",
    "cluster_device",
    "default_jobs",
    "nondeterministic_metrics",
    "plan",
    "run_claims",
    "schedule",
    "select",
]

# Seconds per seed of each experiment at the quick preset, one thread (measured on a 2-core VM): the
# order in which a parallel run starts its work (longest first keeps the workers evenly loaded to the end) and
# the weights of the progress bar's ETA. Only proportions matter; an experiment missing here gets the median.
COST_HINTS: dict[str, float] = {
    "head-count": 22.5,
    "norm-depth-grid": 15.4,
    "init-training": 9.1,
    "pe-lm": 8.5,
    "ffn-width": 6.7,
    "block-faults": 4.4,
    "mask-fills": 4.2,
    "tiny-heads": 2.6,
    "softmax-saturation": 1.5,
    "bn-vs-ln": 1.1,
    "head-loop-benchmark": 0.7,
    "dot-product-variance": 0.65,
    "identity-mlp": 0.5,
    "sinusoidal-algebra": 0.15,
    "block-anatomy": 0.05,
    "mha-shapes": 0.03,
    "head-parameters": 0.02,
    "layernorm-reference": 0.01,
    "padding-pe": 0.01,
}


def cluster_device(device: str) -> str:
    """``device`` for the nodes of a cluster: a name the lab knows (ValueError in one line otherwise); whether the
    cluster has GPUs is asked of the cluster once connected (:func:`anatomy.experiments.cluster.run_on_ray`)."""
    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError):
        return check_device(device)  # the same refusal as a local run's
    if parsed.type not in ("cpu", "cuda"):
        return check_device(device)
    return str(parsed) if parsed.type == "cuda" else "cpu"


def select(ids: list[str] | None) -> list[str]:
    """Claim ids in post order; ``ids`` may be full ids or numbers/prefixes ("C20", "20")."""
    load_all()
    ordered = sorted(CLAIMS, key=claim_number)
    if not ids:
        return ordered
    chosen = []
    for want in ids:
        key = want if want.upper().startswith("C") else f"C{want}"
        match = [c for c in ordered if c == key or c.upper().split("-")[0] == key.upper().split("-")[0]]
        if not match:
            raise ValueError(f"unknown claim {want!r}; see `anatomy claims list` (ids like C20-mask-fill or C20)")
        chosen += [m for m in match if m not in chosen]
    return chosen


def default_jobs() -> int:
    """The CPU cores this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def plan(groups: dict[str, list[str]], n_seeds: int) -> list[tuple[str, int]]:
    """The runs to do, ``(experiment, seed)``, longest first: one per experiment and seed, never one per claim."""
    median = sorted(COST_HINTS.values())[len(COST_HINTS) // 2]
    tasks = [(name, seed) for name in groups for seed in range(n_seeds)]
    return sorted(tasks, key=lambda task: (-COST_HINTS.get(task[0], median), task[0], task[1]))


def run_claims(
    ids: list[str] | None = None,
    *,
    preset: str = "quick",
    seeds: int | None = None,
    out: str | Path = "claims-out",
    progress: bool = True,
    jobs: int | None = 1,
    resume: bool = False,
    cluster: str | None = None,
    cluster_cpus: float = 1.0,
    device: str = "cpu",
) -> dict[str, Any]:
    """Run the claims ``ids`` (default: all) and write ``claims.json`` and the reports into ``out``.

    ``jobs``: worker processes (``None``: one per core); 1 runs everything here, one run after the other. With
    ``jobs > 1`` a script calling this needs the usual ``if __name__ == "__main__":`` guard (multiprocessing).
    ``cluster``: a Ray address (``HOST:PORT`` or ``auto``): every unit is a Ray task of ``cluster_cpus`` CPUs
    (:mod:`anatomy.experiments.cluster`) and ``jobs`` is not used. Each finished unit is stored in ``out/units/``
    as it completes; ``resume`` runs only the missing ones (:mod:`anatomy.experiments.store`).
    ``device``: where the experiments' models and tensors live (``cpu``, ``cuda[:N]``; checked before anything
    starts: on this machine, or on the cluster's nodes with ``cluster``); ``jobs`` then defaults to 1 (the GPU is
    the worker)."""
    if preset not in CLAIM_PRESETS:
        raise ValueError(f"unknown preset {preset!r}; valid names: {', '.join(CLAIM_PRESETS)}")
    n_seeds = DEFAULT_SEEDS[preset] if seeds is None else seeds
    if not isinstance(n_seeds, int) or isinstance(n_seeds, bool) or n_seeds < 1:
        raise ValueError(f"seeds must be a positive integer, got {seeds!r}")
    device = cluster_device(device) if cluster is not None else check_device(device)
    jobs = (1 if is_cuda(device) else default_jobs()) if jobs is None else jobs
    if not isinstance(jobs, int) or isinstance(jobs, bool) or jobs < 1:
        raise ValueError(f"jobs must be a positive integer, got {jobs!r}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    chosen = select(ids)
    groups: dict[str, list[str]] = {}
    for cid in chosen:
        groups.setdefault(CLAIMS[cid].experiment, []).append(cid)
    tasks = plan(groups, n_seeds)
    if cluster is not None:
        from anatomy.experiments.cluster import preflight

        preflight(cluster)
    store = Store.start(out, preset=preset, seeds=n_seeds, claims=chosen, resume=resume, device=device, units=tasks)
    for path, why in store.rejected:  # said even with --quiet: the run does more than the user may expect
        _stderr_line(f"--resume: {path}: {why}; running it again")
    todo = [t for t in tasks if t not in store.done]
    if resume and progress:
        print(
            f"resuming {out}: {len(tasks) - len(todo)} of {len(tasks)} units already done, {len(todo)} to run",
            flush=True,
        )
    jobs = max(1, min(jobs, len(todo)))
    where: dict[str, Any] = {}

    # The experiments train tiny models: one intra-op thread is faster than two (no synchronisation per op) and
    # keeps runs reproducible and robust to a busy machine. The caller's setting is restored at the end.
    caller_threads = torch.get_num_threads()
    torch.set_num_threads(1)
    t0, began = time.perf_counter(), time.monotonic()
    timeline: list[Run] = []
    try:
        _run_tasks(
            todo,
            groups,
            preset,
            out,
            progress,
            jobs,
            timeline,
            store=store,
            cluster=cluster,
            cluster_cpus=cluster_cpus,
            where=where,
            device=device,
        )
    finally:
        torch.set_num_threads(caller_threads)
    done = {t: store.done[t] for t in tasks}
    doc = _document(groups, chosen, done, preset, n_seeds, where.get("slots", jobs), time.perf_counter() - t0, device)
    doc["schedule"] = schedule(timeline, began, time.monotonic())
    if resume:
        doc["schedule"]["resumed_units"] = len(tasks) - len(todo)
        doc["schedule"]["recomputed"] = [{"unit": path.name, "why": why} for path, why in store.rejected]
    if cluster is not None:
        doc["environment"]["cluster"] = {
            k: where[k] for k in ("address", "nodes", "cpus", "cpus_per_unit", "gpus", "gpus_per_unit") if k in where
        }
        doc["schedule"]["retried"] = where.get("retried", [])
    (out / "claims.json").write_text(json.dumps(doc, indent=2, ensure_ascii=False), encoding="utf-8")
    from anatomy.experiments.report import write_reports

    write_reports(doc, out)
    store.finish()
    return doc


def _run_tasks(
    tasks: list[tuple[str, int]],
    groups: dict[str, list[str]],
    preset: str,
    out: Path,
    progress: bool,
    jobs: int,
    timeline: list[Run] | None = None,
    *,
    store: Store | None = None,
    cluster: str | None = None,
    cluster_cpus: float = 1.0,
    where: dict[str, Any] | None = None,
    device: str = "cpu",
) -> Done:
    median = sorted(COST_HINTS.values())[len(COST_HINTS) // 2]
    cost = {t: COST_HINTS.get(t[0], median) for t in tasks}
    desc = f"{len(tasks)} runs on {'Ray' if cluster else jobs} worker{'s' if jobs > 1 or cluster else ''}"
    bar = tqdm(
        total=sum(cost.values()),
        disable=not progress,
        unit="",
        desc=desc,
        bar_format="{desc}: {percentage:3.0f}%|{bar}| [{elapsed}<{remaining}]{postfix}",
    )
    left = {name: len([t for t in tasks if t[0] == name]) for name in groups}
    done: Done = dict(store.done) if store is not None else {}
    n_seeds = {name: len([t for t in done if t[0] == name]) + left[name] for name in groups}
    count = [0]

    def finished(task: Unit, result: Result) -> None:
        if store is not None:
            store.put(task, result)  # first: a run killed after this line has the unit
        done[task] = result
        count[0] += 1
        bar.set_postfix_str(f"{count[0]}/{len(tasks)} · {task[0]} seed {task[1]}", refresh=False)
        bar.update(min(cost[task], bar.total - bar.n))  # the float sum may round a hair below
        left[task[0]] -= 1
        if progress and not left[task[0]]:
            runtime = sum(done[(task[0], s)][2] for s in range(n_seeds[task[0]]))
            tqdm.write(f"  {task[0]} ({', '.join(c.split('-')[0] for c in groups[task[0]])}) done ({runtime:.1f}s)")

    def said(info: dict[str, Any]) -> None:
        bar.set_description_str(
            f"{len(tasks)} runs on Ray ({info['slots']} at a time on {info['nodes']} "
            f"node{'s' if info['nodes'] != 1 else ''})"
        )

    try:
        if not tasks:
            pass
        elif cluster is not None:
            from anatomy.experiments.cluster import run_on_ray

            retried: list[dict[str, Any]] = []
            info = run_on_ray(
                tasks,
                preset,
                out,
                cluster,
                finished,
                cpus=cluster_cpus,
                timeline=timeline,
                note=tqdm.write if progress else _stderr_line,
                retried=retried,
                started=said,
                device=device,
            )
            if where is not None:
                where.update(info, retried=retried)
        elif jobs == 1:
            threads = torch.get_num_threads()
            for task in tasks:
                result, worker, start, end = _run_timed(task[0], preset, task[1], str(out), device)
                torch.set_num_threads(threads)
                if timeline is not None:
                    timeline.append((task, worker, start, end))
                finished(task, result)
        else:
            _run_pool(tasks, preset, out, jobs, finished, timeline, device)
    finally:
        bar.close()
    return done


def _stderr_line(text: str) -> None:
    print(text.strip(), file=sys.stderr, flush=True)
