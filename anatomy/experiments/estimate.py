"""The plan of a claims run before anything starts (``--dry-run``): its units and their estimated CPU time.

Estimates come from a stored table of measured costs (:data:`MEASURED`), not from a measurement at dry-run time
(so a dry run answers in a second). The table was measured by ``python -m anatomy.experiments.estimate --preset
PRESET``: each experiment runs one unit at that preset with every training loop cut to its first 3 steps
(:class:`anatomy.experiments.fitting.StepProbe`), which times the steps it takes; a unit's estimate is the time
spent outside the training loops plus, for each loop, the steps it asks for times its measured seconds per step
(the first step, which warms up, excluded). Times are CPU seconds of the process (one intra-op thread), so a
busy machine does not inflate them. The steps of one loop cost the same, so this is close for what trains; what
the probe cannot cut (evaluations, timing loops) is measured whole.
"""

from __future__ import annotations

import argparse
import math
import tempfile
import time
from typing import Any

# seconds per unit (one experiment, one seed, one thread) and training steps per unit, per preset and experiment.
# paper: measured by `python -m anatomy.experiments.estimate --preset paper NAME...` on the 2-core VM, torch 2.13 CPU,
# one thread, CPU time: ten rows on 2026-12-01 (shared by 8 engineers, load average 10-18), the nine heaviest on
# 2026-12-02 (shared by 3, load average 1-3.3, one measurement at a time). quick: runner.COST_HINTS (whole units).
MEASURED_ON = {
    "paper": "2-core VM, torch 2.13 CPU, one thread, CPU time; 10 rows on 2026-12-01 (load average "
    "10-18), the 9 heaviest on 2026-12-02 (load average 1-3.3)"
}
MEASURED: dict[str, dict[str, tuple[float, int]]] = {
    "paper": {
        "block-anatomy": (0.68, 0),
        "block-faults": (20526.58, 6400),
        "bn-vs-ln": (551.32, 1600),
        "dot-product-variance": (4.45, 0),
        "ffn-width": (58.15, 5600),
        "head-count": (164.4, 14400),
        "head-loop-benchmark": (3.94, 0),
        "head-parameters": (0.51, 0),
        "identity-mlp": (10.88, 0),
        "init-training": (75.09, 7500),
        "layernorm-reference": (0.02, 0),
        "mask-fills": (3270.38, 2000),
        "mha-shapes": (0.1, 0),
        "norm-depth-grid": (56795.35, 11100),  # probed in 1442 CPU s: its uncut measurement passes at depth 12
        "padding-pe": (0.03, 0),
        "pe-lm": (26681.96, 8000),
        "sinusoidal-algebra": (0.61, 0),
        "softmax-saturation": (7.73, 0),
        "tiny-heads": (45.01, 6000),
    },
}


def measure(preset: str, names: list[str] | None = None, limit: int = 3) -> dict[str, tuple[float, int]]:
    """``{experiment: (estimated seconds per unit, training steps per unit)}`` from one probed unit each."""
    from pathlib import Path

    import torch

    from anatomy.experiments.fitting import StepProbe
    from anatomy.experiments.registry import EXPERIMENTS, Trial
    from anatomy.experiments.units import load_all, seed_everything

    load_all()
    torch.set_num_threads(1)
    table = {}
    for name in names or sorted(EXPERIMENTS):
        seed_everything(0)
        with tempfile.TemporaryDirectory() as tmp, StepProbe(limit) as probe:
            t0, w0 = time.process_time(), time.perf_counter()
            EXPERIMENTS[name].fn(Trial(preset=preset, seed=0, out_dir=Path(tmp)))
            total, wall = time.process_time() - t0, time.perf_counter() - w0
        steps = sum(asked for asked, _ in probe.calls)
        table[name] = (round(total - probe.seconds + sum(a * s for a, s in probe.calls), 2), steps)
        print(f"    {name!r}: {table[name]},  # probed in {total:.1f} CPU s ({wall:.1f} s wall)", flush=True)
    return table


def dry_run(
    ids: list[str] | None,
    *,
    preset: str,
    seeds: int | None = None,
    cluster: str | None = None,
    cluster_cpus: float = 1.0,
    jobs: int | None = None,
    device: str = "cpu",
) -> str:
    """The plan as text: units per experiment and their estimated CPU-hours; nothing runs, nothing connects.
    ``device`` (already checked) is named in the plan; the estimates stay CPU time (none is stored for a GPU)."""
    from anatomy.experiments.registry import CLAIM_PRESETS, CLAIMS, DEFAULT_SEEDS
    from anatomy.experiments.runner import COST_HINTS, default_jobs, plan, select

    if preset not in CLAIM_PRESETS:
        raise ValueError(f"unknown preset {preset!r}; valid names: {', '.join(CLAIM_PRESETS)}")
    n_seeds = DEFAULT_SEEDS[preset] if seeds is None else seeds
    if n_seeds < 1:
        raise ValueError(f"seeds must be a positive integer, got {seeds!r}")
    groups: dict[str, list[str]] = {}
    for cid in select(ids):
        groups.setdefault(CLAIMS[cid].experiment, []).append(cid)
    units = plan(groups, n_seeds)
    table: dict[str, tuple[float, Any]] = dict(MEASURED.get(preset, {}))
    source = (
        f"a stored table of per-step costs measured at the {preset} preset ({MEASURED_ON[preset]})" if table else ""
    )
    if not table and preset == "quick":
        table = {k: (v, "") for k, v in COST_HINTS.items()}
        source = "runner.COST_HINTS (whole units measured at the quick preset, 2-core VM, one thread)"
    none = f"none stored for the {preset} preset (stored: {', '.join(['quick', *MEASURED])})"
    cuda = device.startswith("cuda")
    local = jobs or (1 if cuda else default_jobs())
    where = (
        f"the Ray cluster at {cluster} ({cluster_cpus:g} CPU{' and 1 GPU' if cuda else ''} per unit)"
        if cluster
        else f"{local} local process{'es' if local > 1 else ''}"
    ) + f", device {device}"
    lines = [
        f"plan: preset {preset}, {n_seeds} seed{'s' if n_seeds > 1 else ''} per experiment, "
        f"{sum(len(v) for v in groups.values())} claims in {len(groups)} experiments -> {len(units)} units "
        f"(one experiment on one seed each) on {where}",
        f"estimates: {source or none}"
        + ("; CPU time: no GPU costs are stored, a GPU unit takes its own time" if cuda else ""),
        "",
        f"{'experiment':<24} {'claims':<26} {'units':>5} {'steps/unit':>10} {'s/unit':>9} {'CPU-h':>8}",
    ]
    total, longest, known = 0.0, 0.0, True
    order = sorted(groups, key=lambda e: -table.get(e, (math.inf, 0))[0])
    for exp in order:
        claims = " ".join(c.split("-")[0] for c in groups[exp])
        if len(claims) > 26:
            claims = claims[:23] + "..."
        if exp in table:
            seconds, steps = table[exp]
            hours = seconds * n_seeds / 3600
            total += hours
            longest = max(longest, seconds)
            lines.append(f"{exp:<24} {claims:<26} {n_seeds:>5} {steps!s:>10} {seconds:>9.2f} {hours:>8.3f}")
        else:
            known = False
            lines.append(f"{exp:<24} {claims:<26} {n_seeds:>5} {'?':>10} {'?':>9} {'?':>8}")
    slots = None if cluster else local
    lines.append("")
    if table and known and cuda:
        lines.append(
            f"total: {total:.2f} CPU-hours on the CPU; the longest unit {longest / 3600:.2f} h there (a GPU's "
            "time is not measured)"
        )
    elif table and known:
        lines.append(
            f"total: {total:.2f} CPU-hours; the longest unit {longest / 3600:.2f} h"
            + (
                f"; on {slots} CPU{'s' if slots > 1 else ''} at least {max(total / slots, longest / 3600):.2f}"
                " h of wall time"
                if slots
                else "; wall time: CPU-hours / the cluster's CPUs, at least the longest unit"
            )
        )
    elif table:
        lines.append(f"total: at least {total:.2f} CPU-hours (experiments marked ? have no stored cost)")
    lines.append("nothing was run (--dry-run)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    from anatomy.experiments.registry import CLAIM_PRESETS

    p = argparse.ArgumentParser(description="measure the per-unit costs stored in estimate.MEASURED")
    p.add_argument("--preset", choices=CLAIM_PRESETS, default="paper")
    p.add_argument("names", nargs="*", help="experiments (default: all)")
    args = p.parse_args(argv)
    print(f"    {args.preset!r}: {{")
    measure(args.preset, args.names or None)
    print("    },")


if __name__ == "__main__":
    main()
