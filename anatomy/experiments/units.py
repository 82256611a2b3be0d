"""One unit of the claims lab: one experiment on one seed, run wherever it is sent (this process, a local worker
or a Ray task; ``runner.py`` and ``cluster.py`` both call :func:`run_one`)."""

from __future__ import annotations

import random
import time
from pathlib import Path

import numpy as np
import torch

from anatomy.experiments.devices import synchronize
from anatomy.experiments.registry import EXPERIMENTS, Trial


def load_all() -> None:
    """Import every claims module so that the registry is complete."""
    from anatomy.experiments import claims  # noqa: F401  (registration happens on import)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)  # noqa: NPY002  (experiments may use the legacy global generator)
    torch.manual_seed(seed)


def run_one(
    name: str, preset: str, seed: int, out: str, device: str = "cpu"
) -> tuple[dict[str, float], list[str], float]:
    """One experiment on one seed: ``(metrics, figures written, seconds)``. Figures are drawn on seed 0 only.
    ``device``: where its models and tensors live (an experiment declared ``cpu_only`` stays on the CPU)."""
    torch.set_num_threads(1)
    seed_everything(seed)
    exp = EXPERIMENTS[name]
    where = exp.device_for(device)
    trial = Trial(preset=preset, seed=seed, out_dir=Path(out), first_seed=seed == 0, device=where)
    t0 = time.perf_counter()
    measured = exp.fn(trial)
    synchronize(where)  # the queued kernels of a GPU are part of the unit's time
    seconds = time.perf_counter() - t0
    return {k: float(v) for k, v in measured.items()}, list(trial.figures), seconds
