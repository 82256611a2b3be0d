"""The training loop: named steps over one run state, readable top to bottom.

    setup (training/state.py: task, model, AdamW, [resume], run folder, scaler, DDP, compile) → for each step:
        lr from warmup + cosine → global batch → this process's rows → train_step (training/step.py: forward,
        backward, clip, one read-back; a non-finite loss stops, naming the step) → log (metrics.jsonl, progress
        bar, loss spikes) → evaluate (early stop) → checkpoint (atomic, keep the last N)
    → test-set evaluation → summary.json, loss.png

A NaN or Inf loss means numerical instability, not a batch to skip (nanoGPT's maintainer declined "skip NaN
steps"): training stops with the step's number and the last checkpoint stays the last good one.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from anatomy.errors import CheckpointError
from anatomy.training import checkpoint as ckpt
from anatomy.training import distributed as dist
from anatomy.training import run_dir as outputs
from anatomy.training.options import TrainOptions
from anatomy.training.resuming import checked_resume
from anatomy.training.state import METRICS, PLOT, SUMMARY, RunState, rng_state, setup
from anatomy.training.step import (
    MAX_SKIPPED,
    StepResult,
    TrainingError,
    check_finite,
    lr_at,
    make_optimizer,
    to_device,
    train_step,
)
from anatomy.training.tasks import LossAndLogits

__all__ = ["METRICS", "PLOT", "SUMMARY", "TrainResult", "TrainingError", "lr_at", "make_optimizer", "resume", "train"]


@dataclass
class TrainResult:
    run_dir: Path
    steps: int
    last_checkpoint: Path | None
    stopped_early: bool = False
    summary: dict[str, Any] = field(default_factory=dict)


def train(
    options: TrainOptions,
    model_overrides: dict[str, Any],
    run_dir: str | Path,
    *,
    log: Callable[[str], None] | None = None,
    overwrite: bool = False,
) -> TrainResult:
    """Train as ``options`` say (``model_overrides`` on top of ``options.model``), writing into ``run_dir``: a new
    or empty folder, one ``anatomy train`` created, or (``overwrite``) any folder that holds no training run."""
    run_dir = Path(run_dir)
    outputs.check_run_out(run_dir, overwrite=overwrite)
    owner = outputs.holder(run_dir) if outputs.is_main_process() else None
    if owner:
        raise outputs.refusal(run_dir, owner)
    if ckpt.step_dirs(run_dir) or ckpt.incomplete_dirs(run_dir):
        raise ValueError(
            f"--out {str(run_dir)!r} already holds a training run; continue it with --resume "
            f"{str(run_dir)!r} or choose another directory"
        )
    lock = outputs.RunLock(run_dir, log or _stderr)
    try:
        return _run(options, model_overrides, run_dir, None, log, lock)
    finally:
        lock.release()


def resume(
    run_dir: str | Path,
    changes: dict[str, Any] | None = None,
    *,
    preset: str | None = None,
    log: Callable[[str], None] | None = None,
) -> TrainResult:
    """Continue the latest checkpoint of ``run_dir`` (the one ``checkpoints/latest.json`` names), or the checkpoint
    directory given, exactly; ``latest.json`` then points at it, so the run follows this branch. ``changes``
    may only touch ``RESUMABLE`` options; with ``preset``, the run must have been started from that preset (with the
    same overrides)."""
    path = Path(run_dir)
    if not path.is_dir():
        raise CheckpointError(f"checkpoint directory {str(path)!r} does not exist")
    root = path.parent.parent if path.parent.name == "checkpoints" else path
    lock = outputs.RunLock(root, log or _stderr)
    try:
        if outputs.is_main_process():
            lock.acquire()
        return _resume(path, root, changes, preset, log, lock)
    finally:
        lock.release()


def _resume(
    path: Path,
    root: Path,
    changes: dict[str, Any] | None,
    preset: str | None,
    log: Callable[[str], None] | None,
    lock: outputs.RunLock,
) -> TrainResult:
    last, saved, options, saved_model = checked_resume(path, changes, preset, log or _stderr)
    return _run(options, saved_model, root, (last, saved), log, lock)


def _run(
    options: TrainOptions,
    model_overrides: dict[str, Any],
    run_dir: Path,
    resumed: tuple[Path, dict[str, Any]] | None,
    log: Callable[[str], None] | None,
    lock: outputs.RunLock,
) -> TrainResult:
    run = setup(options, model_overrides, run_dir, resumed, log or _stderr, lock)
    init_val = (
        run.init.val_before(run.model, run.task, _loss_and_logits(run), options.batch_size, run.say)
        if run.init and run.init.state
        else None
    )
    _introduce(run)
    from tqdm.auto import tqdm

    bar = tqdm(
        total=options.steps,
        initial=run.start,
        disable=not (run.world.is_main and options.progress),
        unit="step",
        dynamic_ncols=True,
        file=sys.stderr,
    )
    check = _stop_if_nonfinite(run)
    run.model.train()
    try:
        for step in range(run.start + 1, options.steps + 1):
            run.step = step
            step_start = time.perf_counter()
            lr = lr_at(step, options)
            batch = run.task.batch("train", run.data_generator, options.batch_size)  # the global batch, everywhere
            result = train_step(run.stepper, dist.shard(batch, run.world), lr, check=check)
            _count_overflow(run, result)
            run.window_tokens += run.task.n_tokens(batch)
            run.window_time += time.perf_counter() - step_start
            bar.update(1)
            evaluate_now = step % options.eval_every == 0 or step == options.steps
            record = _log_step(run, result, lr, evaluate_now, bar)
            if evaluate_now:
                record = {**(record or {}), **evaluate(run, result.loss)}  # evaluate_now: a record
            if record is not None and run.world.is_main:
                outputs.append_line(run_dir / METRICS, json.dumps(record))
            outputs.fault(f"after-step-{step}")  # a test's SIGKILL at an exact step (ANATOMY_FAULT)
            if step % options.save_every == 0 or step == options.steps or run.stopped_early:
                run.last_saved = checkpoint(run) or run.last_saved
            if run.stopped_early:
                run.say(
                    f"early stop at step {step}: no better val loss in {options.patience} evaluations "
                    f"(best {run.best_val:.4f})"
                )
                break
    finally:
        bar.close()
    return _finish(run, init_val)


def _stop_if_nonfinite(run: RunState) -> Callable[[float, float | None], None]:
    """The step's check: a non-finite loss (or gradient norm, unless fp16's scaler skips the step) stops the run."""
    return lambda loss, norm: check_finite(
        run.step, loss, norm, scaled=run.scaler.is_enabled(), last_good=run.last_saved
    )


def _introduce(run: RunState) -> None:
    options, model = run.options, run.model
    run.say(
        f"training {ckpt.config_of(model).architecture} ({sum(p.numel() for p in model.parameters()):,} "
        f"parameters) on "
        f"{run.task.name}, {options.steps} steps, global batch {options.batch_size} x {run.world.world_size} "
        f"process(es), {run.device}, {options.precision}"
    )
    if options.precision == "fp16" and run.device.type == "cpu":
        run.say(
            "precision=fp16 on a CPU: PyTorch emulates float16 matrix products there (about 20x slower than "
            "fp32 on this project's test machine); fp16 is for GPUs without bf16, use precision=bf16 or fp32 "
            "on a CPU"
        )


def _count_overflow(run: RunState, result: StepResult) -> None:
    """fp16: a skipped step is said; ``MAX_SKIPPED`` in a row stop training."""
    run.skipped_in_a_row = run.skipped_in_a_row + 1 if result.overflow else 0
    if not result.overflow:
        return
    if run.skipped_in_a_row >= MAX_SKIPPED:
        raise TrainingError(
            f"fp16 gradients overflowed at {MAX_SKIPPED} steps in a row (up to step {run.step}; "
            f"loss scale now {run.scaler.get_scale():g}); training stopped. The last good "
            f"checkpoint is {str(run.last_saved)!r}. Use precision=bf16 or fp32, or lower lr."
        )
    run.say(
        f"step {run.step}: fp16 gradients overflowed; step skipped, loss scale {result.scale_before:g} -> "
        f"{run.scaler.get_scale():g}"
    )


def _log_step(run: RunState, result: StepResult, lr: float, evaluate_now: bool, bar: Any) -> dict[str, Any] | None:
    """The spike watch (a line when a spike starts) and the step's metrics record when it is logged (every
    ``log_every`` steps, at evaluations, spikes and overflows, and at the end); None otherwise."""
    options, step, loss, overflow = run.options, run.step, result.loss, result.overflow
    spike_z = run.spikes.update(step, loss)
    if spike_z is not None and not run.spikes.continuing:
        run.say(
            f"step {step}: loss spike: {loss:.4f} is {spike_z:.0f} standard deviations above the recent "
            f"average {run.spikes.mean:.4f} (lr {lr:.2e}, gradient norm {result.grad_norm:.3g}); if it recurs, "
            "lower lr or raise warmup_steps"
        )
    if not (step % options.log_every == 0 or step == options.steps or evaluate_now or spike_z is not None or overflow):
        return None
    record = {
        "step": step,
        "loss": loss,
        "lr": lr,
        "tokens_per_s": run.window_tokens / max(run.window_time, 1e-9),
        "grad_norm": result.grad_norm if not overflow else None,
    }  # JSON has no inf
    if spike_z is not None:
        record["spike_z"] = spike_z
    if run.scaler.is_enabled():
        record["loss_scale"] = run.scaler.get_scale()
        if overflow:
            record["skipped"] = True
    bar.set_postfix(loss=f"{loss:.4f}", lr=f"{lr:.2e}", tok_s=f"{record['tokens_per_s']:,.0f}")
    run.window_tokens, run.window_time = 0, 0.0
    return record


def _loss_and_logits(run: RunState) -> LossAndLogits:
    # evaluation: the plain model, every process on the whole batch
    def loss_and_logits(batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        with run.autocast():
            out = run.model(**to_device(batch, run.device))
        return out.loss, out.logits

    return loss_and_logits


def _evaluate_split(run: RunState, split: str) -> dict[str, float]:
    run.model.eval()
    with torch.no_grad():
        values = run.task.evaluate(_loss_and_logits(run), split, run.options.batch_size)
    return {k: float(v) for k, v in values.items()}


def evaluate(run: RunState, train_loss: float) -> dict[str, float]:
    """The validation metrics (``val_*``, said in one line); best val loss and early stop updated."""
    val = _evaluate_split(run, "val")
    run.model.train()
    if val["loss"] < run.best_val:
        run.best_val, run.evals_since_best = val["loss"], 0
    else:
        run.evals_since_best += 1
    shown = ", ".join(f"val {k} {v:.4f}" for k, v in val.items())
    run.say(f"step {run.step}: train loss {train_loss:.4f}, {shown}")
    patience = run.options.patience
    run.stopped_early = dist.broadcast_flag(bool(patience) and run.evals_since_best >= patience, run.world)
    return {f"val_{k}": v for k, v in val.items()}


def checkpoint(run: RunState) -> Path | None:
    """Save the step (main process; atomic, the last ``keep_last`` kept); every process waits for it."""
    path = None
    if run.world.is_main:
        path = ckpt.save_checkpoint(
            run.run_dir,
            run.step,
            model=run.model,
            optimizer=run.optimizer,
            tokenizer=run.task.tokenizer,
            training=run.training_record,
            trainer_state=run.trainer_state(),
            rng=rng_state(run.data_generator),
            keep_last=run.options.keep_last,
        )
    dist.barrier(run.world)
    return path


def _finish(run: RunState, init_val: float | None) -> TrainResult:
    """The test set, summary.json (and the baselines of classify), loss.png."""
    options, run_dir, task = run.options, run.run_dir, run.task
    test = _evaluate_split(run, "test")
    summary: dict[str, Any] = {
        "steps": run.step,
        "best_val_loss": run.best_val,
        **{f"test_{k}": v for k, v in test.items()},
    }
    if init_val is not None:
        summary["init_val_loss"] = init_val  # fine-tuning: the checkpoint's val loss before the first step
    if task.name == "classify" and options.baselines and run.world.is_main:
        summary["baselines_test_accuracy"] = task.baselines()
    if run.world.is_main:
        outputs.write_atomic(run_dir / SUMMARY, json.dumps(summary, indent=2) + "\n")
        run.say(
            "test: "
            + ", ".join(f"{k} {v:.4f}" for k, v in test.items())
            + (
                ""
                if "baselines_test_accuracy" not in summary
                else "; baselines (test accuracy): "
                + ", ".join(f"{k} {v:.4f}" for k, v in summary["baselines_test_accuracy"].items())
            )
        )
        if options.plot:
            outputs.plot_losses(run_dir / METRICS, run_dir / PLOT, run.say)
    dist.barrier(run.world)
    dist.teardown(run.world)
    return TrainResult(run_dir, run.step, run.last_saved, run.stopped_early, summary)


# --------------------------------------------------------------------------------------------------- helpers
def _stderr(message: str) -> None:
    from tqdm.auto import tqdm

    tqdm.write(message, file=sys.stderr)
