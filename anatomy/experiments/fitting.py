"""Training for experiments: preset budgets, tiny models, one plain loop, loss-curve summaries.

Experiments need instrumentation that a production loop does not offer (per-step gradient norms, residual RMS,
injected faults), so they train with :func:`fit`, a dozen readable lines, on synthetic tasks or the embedded
corpora (:mod:`anatomy.experiments.tasks`). Each step is ``anatomy train``'s own
(:func:`anatomy.training.step.train_step`); the optimizer is plain AdamW without weight decay, at the lab's
constant (or warmed-up, or linearly decayed) learning rate.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import torch

from anatomy import ModelConfig, build_model
from anatomy.experiments.devices import on, synchronize
from anatomy.training.step import Stepper, train_step

Batches = Callable[[int], dict[str, torch.Tensor]]  # step → one batch (the keyword arguments of forward)

_AS_FULL = object()


def budget(preset: str, smoke: Any, quick: Any, full: Any, paper: Any = _AS_FULL) -> Any:
    """Pick the value for this preset: ``budget(trial.preset, 20, 300, 2000)``; ``paper`` (the post's sizes:
    :data:`POST_SIZES`) is ``full``'s value unless given."""
    if preset == "paper":
        return full if paper is _AS_FULL else paper
    return {"smoke": smoke, "quick": quick, "full": full}[preset]


# The post's own setting (the 2017 base model it describes): what the ``paper`` preset trains where an
# experiment's statement does not fix the model's size itself.
POST_SIZES = {"d_model": 512, "n_heads": 8, "n_layers": 6, "T": 128}


class StepProbe:
    """Measures the cost of training steps without paying for them: while one is active (``with StepProbe():``),
    :func:`fit` takes only ``limit`` steps of each call and records ``(steps asked, CPU seconds per step)``
    (process time: what the step costs, not how busy the machine is); the losses are padded to the asked length
    with the last one. Used by :mod:`anatomy.experiments.estimate`."""

    active: StepProbe | None = None

    def __init__(self, limit: int = 3) -> None:
        self.limit = limit
        self.calls: list[tuple[int, float]] = []
        self.seconds = 0.0

    def __enter__(self) -> StepProbe:
        StepProbe.active = self
        return self

    def __exit__(self, *_exc: object) -> None:
        StepProbe.active = None


def build(config: ModelConfig, device: str | torch.device = "cpu") -> torch.nn.Module:
    """``build_model(config)`` initialised on the CPU (its generator: the same initial weights on every device),
    then moved to ``device``."""
    return on(device, lambda: build_model(config))


def tiny_model(device: str | torch.device = "cpu", **overrides: Any) -> torch.nn.Module:
    """A small decoder LM (``overrides`` change its :class:`ModelConfig`), built by :func:`build` on ``device``."""
    base = dict(
        architecture="decoder_lm",
        vocab_size=64,
        d_model=64,
        n_heads=4,
        n_layers=2,
        max_seq_len=256,
        positional="sinusoidal",
        norm_position="pre",
        activation="gelu",
        dropout=0.0,
    )
    return build(ModelConfig(**{**base, **overrides}), device)


def model_device(model: torch.nn.Module) -> torch.device:
    """The device of ``model``'s parameters (the CPU for a model without any)."""
    return next((p.device for p in model.parameters()), torch.device("cpu"))


def fit(
    model: torch.nn.Module,
    batch: Callable[[int], dict[str, torch.Tensor]],
    steps: int,
    *,
    lr: float = 3e-3,
    warmup: int = 0,
    clip: float | None = 1.0,
    on_step: Callable[[int, torch.nn.Module], None] | None = None,
    decay: bool = False,
    device: str | torch.device | None = None,
) -> list[float]:
    """AdamW for ``steps`` steps on ``batch(step)``, each one :func:`anatomy.training.step.train_step` (the step of
    ``anatomy train``: fp32, one micro-batch, one process); returns the loss per step (NaN stays NaN: no silent
    skip; the NaN step is taken as it is, and training stops there). Each batch is moved to ``device`` (default:
    the model's); on the CPU nothing moves. ``decay``: the learning rate falls linearly to 0 after the ``warmup``
    steps, so the final weights do not depend on where the last noisy step happened to land and comparisons
    between short runs are steadier."""
    where = model_device(model) if device is None else torch.device(device)
    stepper = Stepper(
        model,
        torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0),
        clip=clip,
        device=None if where.type == "cpu" else where,
    )
    losses = []
    model.zero_grad(set_to_none=True)  # stale gradients of an earlier probe must not enter the first step
    model.train()
    probe = StepProbe.active
    asked, timed = steps, []
    if probe is not None:
        steps = min(steps, probe.limit)
    for step in range(steps):
        if probe is not None:
            synchronize(where)  # a GPU's queue belongs to the step that filled it
        started = time.process_time() if probe is not None else 0.0
        ramp = min(1.0, (step + 1) / warmup) if warmup else 1.0
        hook = None if on_step is None else (lambda step=step: on_step(step, model))
        result = train_step(
            stepper, batch(step), lr * ramp * ((1 - step / steps) if decay else 1.0), after_backward=hook
        )
        losses.append(result.loss)
        if probe is not None:
            synchronize(where)
            timed.append(time.process_time() - started)
        if not math.isfinite(losses[-1]):
            losses += [float("nan")] * (steps - step - 1)
            break
    model.eval()
    if probe is not None and timed:
        per_step = sum(timed[1:]) / (len(timed) - 1) if len(timed) > 1 else timed[0]  # the first one warms up
        probe.calls.append((asked, per_step))
        probe.seconds += sum(timed)
        losses += [losses[-1]] * (asked - len(losses))
    return losses


def mean_tail(values: list[float], frac: float = 0.1) -> float:
    n = max(1, int(len(values) * frac))
    return sum(values[-n:]) / n


def curve_stats(losses: list[float], *, uniform: float | None = None) -> dict[str, float]:
    """Summary of a loss curve: ``final`` (mean of the last 10%, NaN if the run went NaN), ``nan`` (0/1),
    ``spike`` (largest rise of the curve, smoothed over 5% of the steps so that minibatch noise does not count,
    above its running minimum after the first 10% of steps: oscillation; inf if it went NaN), ``rough`` (how much
    the smoothed curve climbs back per unit it descends: 0 for a steady descent, about 1 for a curve that only
    wanders, capped at 2; 2 if it went NaN), ``start`` (first loss) and ``failed`` (1 if NaN, or if the final
    loss is within 0.1 of ``uniform``: nothing learnt)."""
    n = len(losses)
    nan = any(not math.isfinite(v) for v in losses)
    final = float("nan") if nan else mean_tail(losses)
    w = max(1, n // 20)
    smooth = [sum(losses[i : i + w]) / w for i in range(max(1, n - w + 1))] if n else []
    spike, low = 0.0, float("inf")
    for i, v in enumerate(smooth):
        if not math.isfinite(v):
            spike = float("inf")
            break
        if i >= max(1, n // 10):
            spike = max(spike, v - low)
        low = min(low, v)
    steps = [b - a for a, b in zip(smooth, smooth[1:])]
    down = -sum(d for d in steps if d < 0)
    rough = min(2.0, sum(d for d in steps if d > 0) / down) if down > 0 and not nan else 2.0
    failed = nan or (uniform is not None and final >= uniform - 0.1)
    return {
        "final": final,
        "nan": float(nan),
        "spike": spike,
        "rough": rough,
        "start": losses[0] if losses else float("nan"),
        "failed": float(failed),
    }


BLOWN_UP = 1e6


def finite_metrics(values: dict[str, float]) -> dict[str, float]:
    """Metrics with every NaN/inf replaced by ±``BLOWN_UP`` (1e6): a quantity measured on a run that blew up.
    The registry's mean/spread need finite numbers, and a report should say "1e+06" rather than crash."""
    out = {}
    for k, v in values.items():
        v = float(v)
        out[k] = v if math.isfinite(v) else (-BLOWN_UP if v < 0 else BLOWN_UP)
    return out
