"""What a claims run writes into ``claims.json``: the claims judged from the aggregated metrics of their units
(:func:`document`), where the wall time went (:func:`schedule`), and which metrics are wall-clock by declaration
(:data:`NONDETERMINISTIC`)."""

from __future__ import annotations

import fnmatch
import platform
import time
from typing import Any

import torch

from anatomy.experiments.devices import is_cuda
from anatomy.experiments.registry import CLAIMS, EXPERIMENTS, Metric, Verdict
from anatomy.experiments.store import Result, Run, Unit

# Metrics that are not a function of the seed: they time code on this machine, at this moment (and so may the
# verdict of a claim that reads them). Everything else an experiment records is bit-equal between runs with the
# same seeds, serial or parallel (tests/experiments/test_runner.py). Names are fnmatch patterns.
NONDETERMINISTIC: dict[str, tuple[tuple[str, ...], str]] = {
    "head-loop-benchmark": (("speedup_*", "*_ms_cfg*"), "wall-clock times of attention kernels on this machine"),
    "head-count": (("lm_step_ms_h*", "time_ratio_*"), "wall-clock times of training steps on this machine"),
}


def nondeterministic_metrics(experiment: str, metrics: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """``{"metrics": [...], "why": ...}`` for those of ``metrics`` (recorded by ``experiment``) that are not
    reproducible from the seed; ``{}`` when all of them are."""
    patterns, why = NONDETERMINISTIC.get(experiment, ((), ""))
    odd = [m for m in metrics if any(fnmatch.fnmatchcase(m, p) for p in patterns)]
    return {"metrics": odd, "why": why} if odd else {}


Done = dict[Unit, Result]


def schedule(timeline: list[Run], began: float, ended: float) -> dict[str, Any]:
    """Where the wall time of the runs went, from ``(task, worker, start, end)`` records: each worker's busy
    seconds, its wait before its first run (start-up) and after its last one (the tail, while others finish)."""
    workers: dict[int | str, list[tuple[float, float]]] = {}
    for _task, who, start, end in timeline:
        workers.setdefault(who, []).append((start, end))
    wall = ended - began
    rows = []
    for runs in workers.values():
        busy = sum(end - start for start, end in runs)
        first, last = min(s for s, _ in runs), max(e for _, e in runs)
        rows.append(
            {
                "runs": len(runs),
                "busy_s": round(busy, 2),
                "start_s": round(first - began, 2),
                "tail_s": round(ended - last, 2),
                "idle_s": round(wall - busy, 2),
            }
        )
    rows.sort(key=lambda r: -r["busy_s"])
    return {
        "wall_s": round(wall, 2),
        "workers": rows,
        "utilisation": round(sum(r["busy_s"] for r in rows) / (wall * len(rows)), 3) if rows else 0.0,
    }


def document(
    groups: dict[str, list[str]],
    chosen: list[str],
    done: Done,
    preset: str,
    n_seeds: int,
    jobs: int,
    wall: float,
    device: str = "cpu",
) -> dict[str, Any]:
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
                "id": cid,
                "section": c.section,
                "statement_zh": c.statement_zh,
                "statement_en": c.statement_en,
                "experiment": exp_name,
                "rule": c.rule_text,
                "verdict": verdict.verdict,
                "reason_en": verdict.reason_en,
                "reason_zh": verdict.reason_zh,
                "metrics": {m: metrics[m].to_dict() for m in c.metrics},
                "figures": figures,
                "runtime_s": round(runtime / len(claim_ids), 3),
            }
            results[cid]["device"] = exp.device_for(device)
            if exp.cpu_only:
                results[cid]["cpu_only"] = exp.cpu_only
            odd = nondeterministic_metrics(exp_name, c.metrics)
            if odd:
                results[cid]["nondeterministic"] = odd
    return {
        "preset": preset,
        "seeds": n_seeds,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "environment": {
            "torch": torch.__version__,
            "python": platform.python_version(),
            "threads": 1,
            "jobs": jobs,
            "machine": platform.machine(),
            "device": device,
            **({"gpu": torch.cuda.get_device_name(device)} if is_cuda(device) and torch.cuda.is_available() else {}),
        },
        "wall_s": round(wall, 1),
        "claims": [results[c] for c in chosen],
    }
