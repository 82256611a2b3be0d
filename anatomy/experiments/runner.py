"""Run claims: each experiment once per seed, metrics aggregated, each claim's declared rule applied.

The unit of work is one experiment on one seed. Claims that share an experiment share its runs: it trains once
per seed, whatever the number of claims reading its metrics. With ``jobs > 1`` the runs are spread over worker
processes (one intra-op thread each), the longest first, and one progress bar with an ETA follows them all; with
``jobs=1`` they run one after the other in this process. Every run starts from ``seed_everything(seed)`` in a
process with one intra-op thread, so a metric does not depend on where or in which order it ran: serial and
parallel runs give bit-equal numbers, except the metrics listed in :data:`NONDETERMINISTIC` (wall-clock timings),
which ``claims.json`` names per claim with the reason.
"""

from __future__ import annotations

import fnmatch
import json
import multiprocessing
import os
import platform
import random
import signal
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from anatomy.experiments.registry import (
    CLAIM_PRESETS,
    CLAIMS,
    DEFAULT_SEEDS,
    EXPERIMENTS,
    Context,
    Metric,
    Verdict,
    claim_number,
)

# Metrics that are not a function of the seed: they time code on this machine, at this moment (and so may the
# verdict of a claim that reads them). Everything else an experiment records is bit-equal between runs with the
# same seeds, serial or parallel (tests/experiments/test_runner.py). Names are fnmatch patterns.
NONDETERMINISTIC: dict[str, tuple[tuple[str, ...], str]] = {
    "head-loop-benchmark": (("speedup_*", "*_ms_cfg*"), "wall-clock times of attention kernels on this machine"),
    "head-count": (("lm_step_ms_h*", "time_ratio_*"), "wall-clock times of training steps on this machine"),
}

# Seconds per seed of each experiment at the quick preset, one thread (2-core VM, measured for issue 14): the
# order in which a parallel run starts its work (longest first keeps the workers evenly loaded to the end) and
# the weights of the progress bar's ETA. Only proportions matter; an experiment missing here gets the median.
COST_HINTS: dict[str, float] = {
    "head-count": 22.5, "norm-depth-grid": 15.4, "init-training": 9.1, "pe-lm": 8.5, "ffn-width": 6.7,
    "block-faults": 4.4, "mask-fills": 4.2, "tiny-heads": 2.6, "softmax-saturation": 1.5, "bn-vs-ln": 1.1,
    "head-loop-benchmark": 0.7, "dot-product-variance": 0.65, "identity-mlp": 0.5, "sinusoidal-algebra": 0.15,
    "block-anatomy": 0.05, "mha-shapes": 0.03, "head-parameters": 0.02, "layernorm-reference": 0.01,
    "padding-pe": 0.01,
}


def load_all() -> None:
    """Import every claims module so that the registry is complete."""
    from anatomy.experiments import claims  # noqa: F401  (registration happens on import)


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


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)  # noqa: NPY002  (experiments may use the legacy global generator)
    torch.manual_seed(seed)


def default_jobs() -> int:
    """The CPU cores this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def nondeterministic_metrics(experiment: str, metrics: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """``{"metrics": [...], "why": ...}`` for those of ``metrics`` (recorded by ``experiment``) that are not
    reproducible from the seed; ``{}`` when all of them are."""
    patterns, why = NONDETERMINISTIC.get(experiment, ((), ""))
    odd = [m for m in metrics if any(fnmatch.fnmatchcase(m, p) for p in patterns)]
    return {"metrics": odd, "why": why} if odd else {}


def plan(groups: dict[str, list[str]], n_seeds: int) -> list[tuple[str, int]]:
    """The runs to do, ``(experiment, seed)``, longest first: one per experiment and seed, never one per claim."""
    median = sorted(COST_HINTS.values())[len(COST_HINTS) // 2]
    tasks = [(name, seed) for name in groups for seed in range(n_seeds)]
    return sorted(tasks, key=lambda task: (-COST_HINTS.get(task[0], median), task[0], task[1]))


def run_one(name: str, preset: str, seed: int, out: str) -> tuple[dict[str, float], list[str], float]:
    """One experiment on one seed: ``(metrics, figures written, seconds)``. Figures are drawn on seed 0 only."""
    torch.set_num_threads(1)
    seed_everything(seed)
    ctx = Context(preset=preset, seed=seed, out_dir=Path(out), first_seed=seed == 0)
    t0 = time.perf_counter()
    measured = EXPERIMENTS[name].fn(ctx)
    seconds = time.perf_counter() - t0
    return {k: float(v) for k, v in measured.items()}, list(ctx.figures), seconds


def run_claims(ids: list[str] | None = None, *, preset: str = "quick", seeds: int | None = None,
               out: str | Path = "claims-out", progress: bool = True, jobs: int | None = 1) -> dict[str, Any]:
    """Run the claims ``ids`` (default: all) and write ``claims.json`` and the reports into ``out``.

    ``jobs``: worker processes (``None``: one per core); 1 runs everything here, one run after the other. With
    ``jobs > 1`` a script calling this needs the usual ``if __name__ == "__main__":`` guard (multiprocessing)."""
    if preset not in CLAIM_PRESETS:
        raise ValueError(f"unknown preset {preset!r}; valid names: {', '.join(CLAIM_PRESETS)}")
    n_seeds = DEFAULT_SEEDS[preset] if seeds is None else seeds
    if not isinstance(n_seeds, int) or isinstance(n_seeds, bool) or n_seeds < 1:
        raise ValueError(f"seeds must be a positive integer, got {seeds!r}")
    jobs = default_jobs() if jobs is None else jobs
    if not isinstance(jobs, int) or isinstance(jobs, bool) or jobs < 1:
        raise ValueError(f"jobs must be a positive integer, got {jobs!r}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    chosen = select(ids)
    groups: dict[str, list[str]] = {}
    for cid in chosen:
        groups.setdefault(CLAIMS[cid].experiment, []).append(cid)
    tasks = plan(groups, n_seeds)
    jobs = min(jobs, len(tasks))

    # The experiments train tiny models: one intra-op thread is faster than two (no synchronisation per op) and
    # keeps runs reproducible and robust to a busy machine. The caller's setting is restored at the end.
    caller_threads = torch.get_num_threads()
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    try:
        done = _run_tasks(tasks, groups, preset, out, progress, jobs)
    finally:
        torch.set_num_threads(caller_threads)
    doc = _document(groups, chosen, done, preset, n_seeds, jobs, time.perf_counter() - t0)
    (out / "claims.json").write_text(json.dumps(doc, indent=2, ensure_ascii=False), encoding="utf-8")
    from anatomy.experiments.report import write_reports

    write_reports(doc, out)
    return doc


Done = dict[tuple[str, int], tuple[dict[str, float], list[str], float]]


def _run_tasks(tasks: list[tuple[str, int]], groups: dict[str, list[str]], preset: str, out: Path,
               progress: bool, jobs: int) -> Done:
    median = sorted(COST_HINTS.values())[len(COST_HINTS) // 2]
    cost = {t: COST_HINTS.get(t[0], median) for t in tasks}
    bar = tqdm(total=sum(cost.values()), disable=not progress, unit="",
               desc=f"{len(tasks)} runs on {jobs} worker{'s' if jobs > 1 else ''}",
               bar_format="{desc}: {percentage:3.0f}%|{bar}| [{elapsed}<{remaining}]{postfix}")
    left = {name: len([t for t in tasks if t[0] == name]) for name in groups}
    done: Done = {}

    def finished(task, result) -> None:
        done[task] = result
        bar.set_postfix_str(f"{len(done)}/{len(tasks)} · {task[0]} seed {task[1]}", refresh=False)
        bar.update(min(cost[task], bar.total - bar.n))  # the float sum may round a hair below
        left[task[0]] -= 1
        if progress and not left[task[0]]:
            runtime = sum(done[(task[0], s)][2] for s in range(len([t for t in tasks if t[0] == task[0]])))
            tqdm.write(f"  {task[0]} ({', '.join(c.split('-')[0] for c in groups[task[0]])}) done ({runtime:.1f}s)")

    try:
        if jobs == 1:
            threads = torch.get_num_threads()
            for task in tasks:
                result = run_one(task[0], preset, task[1], str(out))
                torch.set_num_threads(threads)
                finished(task, result)
        else:
            _run_pool(tasks, preset, out, jobs, finished)
    finally:
        bar.close()
    return done


_THREAD_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


class WorkerDied(RuntimeError):
    """A worker process ended without an answer (killed, out of memory): the run stops, naming what ran."""


def _run_pool(tasks, preset: str, out: Path, jobs: int, finished) -> None:
    """Spread ``tasks`` over ``jobs`` worker processes, in the given order, each worker taking the next task when
    it is free. Workers fork from a fresh server process that imported torch and the claims once ("forkserver":
    nothing of this process, its threads or locks, is inherited; "spawn" where there is no forkserver). An error in
    a run, or a worker that dies (killed for memory), stops the whole run with that error."""
    if "forkserver" in multiprocessing.get_all_start_methods():
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(["anatomy.experiments.runner", "anatomy.experiments.claims"])
    else:
        context = multiprocessing.get_context("spawn")
    saved = {k: os.environ.get(k) for k in _THREAD_ENV}
    os.environ.update(dict.fromkeys(_THREAD_ENV, "1"))  # the workers start with one intra-op thread
    pool = ProcessPoolExecutor(jobs, mp_context=context, initializer=_init_worker)
    try:
        where = str(Path(out).resolve())  # the workers' current directory is the server's, not necessarily ours
        futures = {pool.submit(run_one, name, preset, seed, where): (name, seed) for name, seed in tasks}
        for future in as_completed(futures):  # submitted longest first: the workers start them in that order
            try:
                result = future.result()
            except BrokenProcessPool:
                name, seed = futures[future]
                raise WorkerDied(f"a worker process died during {name} (seed {seed}) or a run beside it, "
                                 "killed from outside or for memory; try --jobs 1 or fewer jobs") from None
            finished(futures[future], result)
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        for process in list((getattr(pool, "_processes", None) or {}).values()):  # stop the runs under way
            process.terminate()
        raise
    finally:
        pool.shutdown(wait=True)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _init_worker() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the parent, which stops every worker
    torch.set_num_threads(1)
    load_all()


def _document(groups: dict[str, list[str]], chosen: list[str], done: Done, preset: str, n_seeds: int,
              jobs: int, wall: float) -> dict[str, Any]:
    results: dict[str, dict[str, Any]] = {}
    for exp_name, claim_ids in groups.items():
        exp = EXPERIMENTS[exp_name]
        values: dict[str, list[float]] = {}
        figures: list[str] = []
        runtime = 0.0
        for seed in range(n_seeds):
            measured, figs, seconds = done[(exp_name, seed)]
            for k, v in measured.items():
                values.setdefault(k, []).append(v)
            figures += figs
            runtime += seconds
        metrics = {k: Metric(k, v, exp.units.get(k, "")) for k, v in values.items()}
        for cid in claim_ids:
            c = CLAIMS[cid]
            missing = [m for m in c.metrics if m not in metrics]
            if missing:
                raise RuntimeError(f"experiment {exp_name!r} did not record {missing} needed by {cid}")
            verdict: Verdict = c.rule(metrics)
            if n_seeds < 3 and verdict.verdict in ("supported", "refuted", "nuanced"):
                verdict.reason_en += f" (provisional: {n_seeds} seed{'s' if n_seeds > 1 else ''}; a verdict needs ≥3)"
                verdict.reason_zh += f"（暂定：仅 {n_seeds} 个随机种子，正式结论需要 ≥3 个）"
            results[cid] = {
                "id": cid, "section": c.section, "statement_zh": c.statement_zh, "statement_en": c.statement_en,
                "experiment": exp_name, "rule": c.rule_text, "verdict": verdict.verdict,
                "reason_en": verdict.reason_en, "reason_zh": verdict.reason_zh,
                "metrics": {m: metrics[m].to_dict() for m in c.metrics},
                "figures": figures, "runtime_s": round(runtime / len(claim_ids), 3),
            }
            odd = nondeterministic_metrics(exp_name, c.metrics)
            if odd:
                results[cid]["nondeterministic"] = odd
    return {
        "preset": preset, "seeds": n_seeds, "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "environment": {"torch": torch.__version__, "python": platform.python_version(),
                        "threads": 1, "jobs": jobs, "machine": platform.machine()},
        "wall_s": round(wall, 1),
        "claims": [results[c] for c in chosen],
    }
