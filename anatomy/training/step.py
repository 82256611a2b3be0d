"""One optimizer step, shared by ``anatomy train`` (:mod:`anatomy.training.loop`) and the claims lab's ``fit``
(:mod:`anatomy.experiments.fitting`).

    lr → forward (autocast) → loss → backward (``accumulate`` micro-batches, DDP all-reduce on the last one only,
    the fp16 scaler's multiplier) → unscale → clip → one read-back of loss and gradient norm → the caller's check
    (stop on a non-finite loss) → optimizer step (skipped by the scaler on an fp16 overflow) → gradients cleared

Also here: the learning-rate schedule, the AdamW of a run, the autocast of a precision and ``torch.compile``
proven on one step.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from anatomy.training import distributed as dist
from anatomy.training.options import TrainOptions

if TYPE_CHECKING:
    from torch.nn.parallel import DistributedDataParallel

MAX_SKIPPED = 20  # fp16: overflowing steps in a row before training stops


class TrainingError(RuntimeError):
    """Training stopped on a failure (a non-finite loss or gradient): exit code 1."""


def lr_at(step: int, options: TrainOptions) -> float:
    """Linear warmup over ``warmup_steps``, then cosine decay from ``lr`` to ``min_lr`` at ``steps``."""
    if step <= options.warmup_steps:
        return options.lr * step / options.warmup_steps
    progress = min(1.0, (step - options.warmup_steps) / max(1, options.steps - options.warmup_steps))
    return options.min_lr + 0.5 * (1.0 + math.cos(math.pi * progress)) * (options.lr - options.min_lr)


def make_optimizer(model: nn.Module, options: TrainOptions, device: torch.device) -> torch.optim.AdamW:
    """AdamW with decoupled weight decay on matrices (linear and embedding weights) only, never on biases and
    norm gains."""
    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": options.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    # fused: one kernel for every tensor's update (CPU too: the same update, 4x faster than the per-tensor loop)
    return torch.optim.AdamW(
        groups, lr=options.lr, betas=(options.beta1, options.beta2), fused=device.type in ("cuda", "cpu") or None
    )


def autocast_for(precision: str, device: torch.device) -> contextlib.AbstractContextManager[Any]:
    """The autocast context of a run's ``precision`` (bf16, fp16) on ``device``; fp32: a context that does nothing."""
    low = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    return torch.autocast(device.type, dtype=low or torch.bfloat16, enabled=low is not None)


def to_device(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    return {k: v.to(device, non_blocking=True) for k, v in batch.items()}


def maybe_compile(
    model: nn.Module,
    probe: dict[str, torch.Tensor],
    autocast: Callable[[], contextlib.AbstractContextManager[Any]],
    log: Callable[[str], None],
) -> Callable[..., Any]:
    """``torch.compile`` the model, proven on one forward/backward (RNG untouched, gradients cleared); the eager
    model with one log line when compilation is unavailable here."""
    try:
        compiled = torch.compile(model)
        with torch.random.fork_rng(devices=[]), autocast():
            compiled(**probe).loss.backward()
        model.zero_grad(set_to_none=True)
        return compiled
    except Exception as err:  # no C++ compiler, an unsupported Python, a graph break that fails...
        model.zero_grad(set_to_none=True)
        first = str(err).strip().splitlines()[0][:160] if str(err).strip() else ""
        log(f"compile=true: torch.compile is unavailable here ({type(err).__name__}: {first}); training eagerly")
        return model


@dataclass
class Stepper:
    """What one optimizer step needs. ``forward`` is what the batch goes through (the DDP-wrapped or compiled
    model; default ``model``); ``ddp`` the DDP wrapper whose ``no_sync`` skips the all-reduce of all but the last
    micro-batch; ``clip`` None: no clipping (and no gradient norm); ``device`` None: the batch stays where it is."""

    model: nn.Module
    optimizer: torch.optim.Optimizer
    forward: Callable[..., Any] | None = None
    scaler: torch.amp.GradScaler = field(default_factory=lambda: torch.amp.GradScaler("cpu", enabled=False))
    accumulate: int = 1
    clip: float | None = 1.0
    autocast: Callable[[], contextlib.AbstractContextManager[Any]] = contextlib.nullcontext
    device: torch.device | None = None
    world: dist.World = field(default_factory=dist.World)
    ddp: DistributedDataParallel | None = None


@dataclass
class StepResult:
    loss: float  # the mean over micro-batches and processes
    grad_norm: float | None  # before clipping; inf/nan when the gradients overflowed; None when not clipped
    overflow: bool  # a non-finite gradient norm: under fp16 the scaler skipped the step
    scale_before: float | None = None  # fp16: the loss scale before an overflow halved it


def gradients(stepper: Stepper, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Forward and backward over ``batch`` (this process's rows), in ``accumulate`` micro-batches; the mean loss.
    Each micro-batch's loss weighs 1/accumulate, as each process's weighs 1/world_size under DDP (for lm, where
    every row has the same number of tokens, that is exactly the loss of the whole batch)."""
    k, forward = stepper.accumulate, stepper.forward or stepper.model
    rows = next(iter(batch.values())).shape[0] // k
    losses = []
    for i in range(k):  # (dividing by 1, the whole batch as one slice, changes no bit)
        micro = batch if k == 1 else {key: v[i * rows : (i + 1) * rows] for key, v in batch.items()}  # (B/k, ...) rows
        last = i == k - 1
        sync = contextlib.nullcontext() if last or stepper.ddp is None else stepper.ddp.no_sync()  # all-reduce once
        with sync:
            with stepper.autocast():
                loss = forward(**(micro if stepper.device is None else to_device(micro, stepper.device))).loss
            stepper.scaler.scale(loss / k).backward()
        losses.append(loss.detach())
    total: torch.Tensor = sum(losses[1:], losses[0]) / k  # summed in order, as 0.0 + l0 + l1 + ... was
    return total


def train_step(
    stepper: Stepper,
    batch: dict[str, torch.Tensor],
    lr: float,
    *,
    check: Callable[[float, float | None], None] | None = None,
    after_backward: Callable[[], None] | None = None,
) -> StepResult:
    """One optimizer step on ``batch`` at learning rate ``lr``. ``check(loss, grad_norm)`` sees the read-back
    numbers before the optimizer may step and stops training by raising (:func:`check_finite`); without it a
    non-finite step is taken as it is (the lab records the NaN). ``after_backward`` runs between backward and
    clipping (a probe of the gradients)."""
    for group in stepper.optimizer.param_groups:
        group["lr"] = lr
    loss = gradients(stepper, batch)
    if after_backward is not None:
        after_backward()
    scaler = stepper.scaler
    scaler.unscale_(stepper.optimizer)
    norm = None if stepper.clip is None else torch.nn.utils.clip_grad_norm_(stepper.model.parameters(), stepper.clip)
    # One read-back per step, after the backward is queued (on a GPU each read waits for the queue to drain):
    # the loss averaged over processes and the gradient norm, both checked before the optimizer may step.
    read = torch.stack(
        [dist.mean(loss.detach(), stepper.world).float()] + ([] if norm is None else [norm.float()])
    ).tolist()
    mean_loss, grad_norm = read[0], (read[1] if norm is not None else None)
    if check is not None:
        check(mean_loss, grad_norm)
    overflow = grad_norm is not None and not math.isfinite(grad_norm)
    scale = scaler.get_scale() if overflow and scaler.is_enabled() else None
    scaler.step(stepper.optimizer)  # skipped by the scaler when the fp16 gradients overflowed
    scaler.update()
    stepper.optimizer.zero_grad(set_to_none=True)
    return StepResult(mean_loss, grad_norm, overflow, scale)


def check_finite(step: int, loss: float, grad_norm: float | None, *, scaled: bool, last_good: Path | None) -> None:
    """Stop training (``TrainingError`` naming the step and the last good checkpoint) on a non-finite loss, or on a
    non-finite gradient norm unless the fp16 scaler (``scaled``) will skip that step."""
    if not math.isfinite(loss):
        raise TrainingError(
            f"non-finite loss ({loss}) at step {step}; training stopped. "
            + (
                f"The last good checkpoint is {str(last_good)!r}."
                if last_good
                else "No checkpoint was saved before it."
            )
            + " Lower lr or raise warmup_steps."
        )
    if grad_norm is not None and not math.isfinite(grad_norm) and not scaled:
        raise TrainingError(
            f"non-finite gradient norm at step {step} ({grad_norm}); training stopped. The last "
            f"good checkpoint is {str(last_good)!r}. Lower lr or raise warmup_steps."
        )
