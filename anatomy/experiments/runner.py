"""Run claims: each experiment once per seed, metrics aggregated, each claim's declared rule applied."""

from __future__ import annotations

import json
import platform
import random
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from anatomy.experiments.registry import (
    CLAIMS,
    DEFAULT_SEEDS,
    EXPERIMENTS,
    PRESETS,
    Context,
    Metric,
    Verdict,
    claim_number,
)


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


def run_claims(ids: list[str] | None = None, *, preset: str = "quick", seeds: int | None = None,
               out: str | Path = "claims-out", progress: bool = True) -> dict[str, Any]:
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; valid names: {', '.join(PRESETS)}")
    n_seeds = DEFAULT_SEEDS[preset] if seeds is None else seeds
    if not isinstance(n_seeds, int) or n_seeds < 1:
        raise ValueError(f"seeds must be a positive integer, got {seeds!r}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    chosen = select(ids)
    groups: dict[str, list[str]] = {}
    for cid in chosen:
        groups.setdefault(CLAIMS[cid].experiment, []).append(cid)

    # The experiments train tiny models: one intra-op thread is faster than two (no synchronisation per op) and
    # keeps runs reproducible and robust to a busy machine. The caller's setting is restored at the end.
    caller_threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        doc = _run_groups(groups, chosen, preset, n_seeds, out, progress)
    finally:
        torch.set_num_threads(caller_threads)
    (out / "claims.json").write_text(json.dumps(doc, indent=2, ensure_ascii=False), encoding="utf-8")
    from anatomy.experiments.report import write_reports

    write_reports(doc, out)
    return doc


def _run_groups(groups: dict[str, list[str]], chosen: list[str], preset: str, n_seeds: int, out: Path,
                progress: bool) -> dict[str, Any]:
    results: dict[str, dict[str, Any]] = {}
    threads = torch.get_num_threads()
    for exp_name, claim_ids in groups.items():
        exp = EXPERIMENTS[exp_name]
        values: dict[str, list[float]] = {}
        figures: list[str] = []
        t0 = time.perf_counter()
        bar = tqdm(range(n_seeds), desc=f"{', '.join(c.split('-')[0] for c in claim_ids)} {exp_name}",
                   disable=not progress, leave=False, unit="seed")
        for i in bar:
            seed_everything(i)
            ctx = Context(preset=preset, seed=i, out_dir=out, first_seed=i == 0)
            measured = exp.fn(ctx)
            torch.set_num_threads(threads)
            for k, v in measured.items():
                values.setdefault(k, []).append(float(v))
            figures += ctx.figures
        runtime = time.perf_counter() - t0
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
        if progress:
            summary = ", ".join(f"{c} → {results[c]['verdict']}" for c in claim_ids)
            tqdm.write(f"  {exp_name}: {summary} ({runtime:.1f}s)")
    return {
        "preset": preset, "seeds": n_seeds, "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "environment": {"torch": torch.__version__, "python": platform.python_version(),
                        "threads": threads, "machine": platform.machine()},
        "claims": [results[c] for c in chosen],
    }
