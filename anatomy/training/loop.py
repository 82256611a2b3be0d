"""The training loop: one function, readable top to bottom.

    options → task (data, tokenizer) → model → AdamW → [resume] → for each step:
        lr from warmup + cosine → global batch → this process's rows → forward (bf16 autocast if asked)
        → non-finite loss? stop, naming the step → backward → clip (error if non-finite) → step
        → log (metrics.jsonl, progress bar) → evaluate (early stop) → checkpoint (atomic, keep the last N)
    → test-set evaluation → summary.json, loss.png

What makes ``--resume`` exact (bit-identical losses on CPU): the weights, AdamW's moments, the data sampler's
generator, torch's global RNG (dropout) and the step counter are all restored; the learning rate is a pure
function of the step; evaluation draws from its own generator and never touches the training ones.

A NaN or Inf loss means numerical instability, not a batch to skip (nanoGPT's maintainer declined "skip NaN
steps"): training stops with the step's number and the last checkpoint stays the last good one.
"""

from __future__ import annotations

import contextlib
import json
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from anatomy.models import build_model
from anatomy.sizes import check_fits
from anatomy.training import checkpoint as ckpt
from anatomy.training import distributed as dist
from anatomy.training import run_dir as outputs
from anatomy.training.options import TrainOptions
from anatomy.training.resuming import checked_resume
from anatomy.training.spikes import SpikeWatch
from anatomy.training.tasks import make_task

METRICS, SUMMARY, PLOT = "metrics.jsonl", "summary.json", "loss.png"


class TrainingError(RuntimeError):
    """Training stopped on a failure (a non-finite loss or gradient): exit code 1."""


@dataclass
class TrainResult:
    run_dir: Path
    steps: int
    last_checkpoint: Path | None
    stopped_early: bool = False
    summary: dict[str, Any] = field(default_factory=dict)


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
    return torch.optim.AdamW(groups, lr=options.lr, betas=(options.beta1, options.beta2),
                             fused=device.type in ("cuda", "cpu") or None)


def rng_state(data_generator: torch.Generator) -> dict[str, torch.Tensor]:
    state = {"torch": torch.get_rng_state(), "data": data_generator.get_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def restore_rng(state: dict[str, torch.Tensor], data_generator: torch.Generator) -> None:
    torch.set_rng_state(state["torch"])
    data_generator.set_state(state["data"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])


MAX_SKIPPED = 20  # fp16: overflowing steps in a row before training stops


def maybe_compile(model: nn.Module, probe: dict[str, torch.Tensor], autocast, log) -> nn.Module:
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


def autocast_for(precision: str, device: torch.device):
    """The autocast context of a run's ``precision`` (bf16, fp16) on ``device``; fp32: a context that does nothing."""
    low = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    return torch.autocast(device.type, dtype=low or torch.bfloat16, enabled=low is not None)


def to_device(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    return {k: v.to(device, non_blocking=True) for k, v in batch.items()}


def train(options: TrainOptions, model_overrides: dict[str, Any], run_dir: str | Path, *,
          log=None, overwrite: bool = False) -> TrainResult:
    """Train as ``options`` say (``model_overrides`` on top of ``options.model``), writing into ``run_dir``: a new
    or empty folder, one ``anatomy train`` created, or (``overwrite``) any folder that holds no training run."""
    run_dir = Path(run_dir)
    outputs.check_run_out(run_dir, overwrite=overwrite)
    owner = outputs.holder(run_dir) if outputs.is_main_process() else None
    if owner:
        raise outputs.refusal(run_dir, owner)
    if ckpt.step_dirs(run_dir) or ckpt.incomplete_dirs(run_dir):
        raise ValueError(f"--out {str(run_dir)!r} already holds a training run; continue it with --resume "
                         f"{str(run_dir)!r} or choose another directory")
    lock = outputs.RunLock(run_dir, log or _stderr)
    try:
        return _run(options, model_overrides, run_dir, None, log, lock)
    finally:
        lock.release()


def resume(run_dir: str | Path, changes: dict[str, Any] | None = None, *, preset: str | None = None,
           log=None) -> TrainResult:
    """Continue the latest checkpoint of ``run_dir`` (the one ``checkpoints/latest.json`` names), or the checkpoint
    directory given, exactly; ``latest.json`` then points at it, so the run follows this branch. ``changes``
    may only touch ``RESUMABLE`` options; with ``preset``, the run must have been started from that preset (with the
    same overrides)."""
    path = Path(run_dir)
    if not path.is_dir():
        raise ckpt.CheckpointError(f"checkpoint directory {str(path)!r} does not exist")
    root = path.parent.parent if path.parent.name == "checkpoints" else path
    lock = outputs.RunLock(root, log or _stderr)
    try:
        if outputs.is_main_process():
            lock.acquire()
        return _resume(path, root, changes, preset, log, lock)
    finally:
        lock.release()


def _resume(path: Path, root: Path, changes, preset, log, lock) -> TrainResult:
    last, saved, options, saved_model = checked_resume(path, changes, preset, log or _stderr)
    return _run(options, saved_model, root, (last, saved), log, lock)


def _run(options: TrainOptions, model_overrides: dict[str, Any], run_dir: Path, resumed, log,
         lock: outputs.RunLock) -> TrainResult:
    device = dist.device_for(options.device)
    world = dist.setup(device)

    def say(message: str) -> None:
        if world.is_main:
            (log or _stderr)(message)

    if options.batch_size % (world.world_size * options.accumulate):
        raise ValueError(f"batch_size={options.batch_size} (the global batch) must be divisible by the number of "
                         f"processes ({world.world_size}) times accumulate ({options.accumulate})")
    last, saved = resumed if resumed else (None, None)
    tokenizer = None
    if saved is not None:
        from anatomy.data.tokenizers import load_tokenizer

        tokenizer = load_tokenizer(last)

    init = None
    if options.init_from:  # fine-tuning: the checkpoint fixes tokenizer and architecture (training/finetune.py)
        from anatomy.training import finetune

        init = finetune.resumed_start(last, tokenizer, options) if saved else finetune.load_start(options.init_from)
        tokenizer = init.tokenizer
        init.check(options, model_overrides)

    # ---- data, model, optimizer ---------------------------------------------------------------------------
    task = make_task(options, tokenizer)
    config = init.config_for(task, options, model_overrides) if init else task.model_config(model_overrides)
    if saved is not None:
        ckpt.check_tokenizer(tokenizer, ckpt.load_config(last), last)
        if config != ckpt.load_config(last):
            raise ckpt.CheckpointError(f"{str(last / ckpt.CONFIG)!r} was saved with a different model config than "
                                       f"this run builds: {ckpt.config_diff(ckpt.load_config(last), config)}")
    check_fits(config, options.batch_size // (world.world_size * options.accumulate), options.block_size,
               training=True, what="one training step", device=str(device),
               flags="batch_size (or accumulate=k to split it), block_size or the model's sizes")
    torch.manual_seed(options.seed)
    model = build_model(config).to(device)
    if init is not None and init.state is not None:
        init.load_into(model, task, say)
    optimizer = make_optimizer(model, options, device)
    data_generator = torch.Generator().manual_seed(options.seed)
    start, best_val, evals_since_best = 0, math.inf, 0
    spikes = SpikeWatch(options.spike_z, options.warmup_steps)
    if saved is not None:
        ckpt.load_weights(model, last)
        ckpt.check_optimizer(saved["optimizer"], optimizer, model, last)
        optimizer.load_state_dict(saved["optimizer"])
        restore_rng(saved["rng"], data_generator)
        start = int(saved["state"]["step"])
        best_val = float(saved["state"].get("best_val", math.inf))
        evals_since_best = int(saved["state"].get("evals_since_best", 0))
        if "spikes" in saved["state"]:
            spikes.load_state_dict(saved["state"]["spikes"])
        say(f"resuming {str(last)!r} at step {start}")
    training_record = {"options": options.to_dict(), "model_overrides": model_overrides}
    if task.name == "classify":
        training_record["label_names"] = list(task.label_names)
    if world.is_main:
        if saved is None:  # a new run: the folder is created and locked only now, after every check of the input
            outputs.claim_run_dir(run_dir)
            lock.acquire()
            if ckpt.step_dirs(run_dir):  # another process trained here between our first look and the lock
                raise ValueError(f"--out {str(run_dir)!r} already holds a training run; continue it with --resume")
        else:
            if last.parent == run_dir / "checkpoints":  # this branch is now the run's: a crash before its first
                ckpt.set_latest(run_dir, last, {k: v for k, v in options.to_dict().items()  # save resumes it,
                                                if saved["training"]["options"].get(k) != v})  # not the old branch
            (run_dir / SUMMARY).unlink(missing_ok=True)  # a summary of steps past this point no longer holds
        outputs.truncate_metrics(run_dir / METRICS, after=start)

    def autocast():
        return autocast_for(options.precision, device)

    # fp16 needs loss scaling (its range ends at 65504; small gradients underflow): the scaler multiplies the loss,
    # unscales the gradients before clipping, and skips a step whose gradients overflowed, halving the scale.
    scaler = torch.amp.GradScaler(device.type, enabled=options.precision == "fp16")
    if saved is not None and "grad_scaler" in saved["state"]:
        scaler.load_state_dict(saved["state"]["grad_scaler"])
    skipped_in_a_row = 0

    micro_batch = options.batch_size // world.world_size // options.accumulate
    wrapped = dist.wrap(model, world, device)
    forward = wrapped
    if options.compile:
        probe = to_device(task.batch("train", torch.Generator().manual_seed(0), micro_batch), device)
        forward = maybe_compile(forward, probe, autocast, say)

    def step_gradients(local: dict[str, torch.Tensor]) -> torch.Tensor:
        """Forward and backward over this process's rows, in ``accumulate`` micro-batches; the mean loss. Each
        micro-batch's loss weighs 1/accumulate, as each process's weighs 1/world_size under DDP (for lm, where every
        row has the same number of tokens, that is exactly the loss of the whole batch)."""
        total = 0.0
        for i in range(options.accumulate):  # (dividing by 1, the whole batch as one slice, changes no bit)
            micro = {k: v[i * micro_batch:(i + 1) * micro_batch] for k, v in local.items()}  # (B/k, ...) rows
            last = i == options.accumulate - 1
            sync = contextlib.nullcontext() if last or not world.active else wrapped.no_sync()  # all-reduce once
            with sync:
                with autocast():
                    loss = forward(**to_device(micro, device)).loss
                scaler.scale(loss / options.accumulate).backward()
            total = total + loss.detach()
        return total / options.accumulate

    def loss_and_logits(batch):  # evaluation: the plain model, every process on the whole batch
        with autocast():
            out = model(**to_device(batch, device))
        return out.loss, out.logits

    def save(step: int) -> Path | None:
        path = None
        if world.is_main:
            path = ckpt.save_checkpoint(run_dir, step, model=model, optimizer=optimizer, tokenizer=task.tokenizer,
                                        training=training_record,
                                        trainer_state={"best_val": best_val, "evals_since_best": evals_since_best,
                                                       "spikes": spikes.state_dict(),
                                                       **({"grad_scaler": scaler.state_dict()}
                                                          if scaler.is_enabled() else {})},
                                        rng=rng_state(data_generator), keep_last=options.keep_last)
        dist.barrier(world)
        return path

    last_saved = last
    init_val = init.val_before(model, task, loss_and_logits, options.batch_size, say) if init and init.state else None
    say(f"training {config.architecture} ({sum(p.numel() for p in model.parameters()):,} parameters) on "
        f"{task.name}, {options.steps} steps, global batch {options.batch_size} x {world.world_size} process(es), "
        f"{device}, {options.precision}")
    if options.precision == "fp16" and device.type == "cpu":
        say("precision=fp16 on a CPU: PyTorch emulates float16 matrix products there (about 20x slower than fp32 on "
            "this project's test machine); fp16 is for GPUs without bf16, use precision=bf16 or fp32 on a CPU")

    # ---- the loop -----------------------------------------------------------------------------------------
    from tqdm.auto import tqdm

    bar = tqdm(total=options.steps, initial=start, disable=not (world.is_main and options.progress),
               unit="step", dynamic_ncols=True, file=sys.stderr)
    window_tokens, window_time = 0, 0.0  # tokens/s counts training steps only, not evaluation or saving
    stopped_early = False
    model.train()
    for step in range(start + 1, options.steps + 1):
        step_start = time.perf_counter()
        lr = lr_at(step, options)
        for group in optimizer.param_groups:
            group["lr"] = lr

        batch = task.batch("train", data_generator, options.batch_size)  # the global batch, same everywhere
        loss = step_gradients(dist.shard(batch, world))
        scaler.unscale_(optimizer)
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), options.grad_clip)
        # One read-back per step, after the backward is queued (on a GPU each read waits for the queue to drain):
        # the loss averaged over processes and the gradient norm, both checked before the optimizer may step.
        mean_loss, grad_norm = torch.stack([dist.mean(loss.detach(), world).float(), norm.float()]).tolist()
        if not math.isfinite(mean_loss):
            bar.close()
            raise TrainingError(f"non-finite loss ({mean_loss}) at step {step}; training stopped. "
                                + (f"The last good checkpoint is {str(last_saved)!r}." if last_saved else
                                   "No checkpoint was saved before it.")
                                + " Lower lr or raise warmup_steps.")
        overflow = not math.isfinite(grad_norm)
        if overflow and not scaler.is_enabled():
            bar.close()
            raise TrainingError(f"non-finite gradient norm at step {step} ({grad_norm}); training stopped. The last "
                                f"good checkpoint is {str(last_saved)!r}. Lower lr or raise warmup_steps.")
        scale = scaler.get_scale() if overflow else None
        scaler.step(optimizer)  # skipped by the scaler when the fp16 gradients overflowed
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        skipped_in_a_row = skipped_in_a_row + 1 if overflow else 0
        if overflow:
            if skipped_in_a_row >= MAX_SKIPPED:
                bar.close()
                raise TrainingError(f"fp16 gradients overflowed at {MAX_SKIPPED} steps in a row (up to step {step}; "
                                    f"loss scale now {scaler.get_scale():g}); training stopped. The last good "
                                    f"checkpoint is {str(last_saved)!r}. Use precision=bf16 or fp32, or lower lr.")
            say(f"step {step}: fp16 gradients overflowed; step skipped, loss scale {scale:g} -> "
                f"{scaler.get_scale():g}")

        window_tokens += task.n_tokens(batch)
        window_time += time.perf_counter() - step_start
        bar.update(1)
        record = None
        evaluate_now = step % options.eval_every == 0 or step == options.steps
        spike_z = spikes.update(step, mean_loss)
        if spike_z is not None and not spikes.continuing:
            say(f"step {step}: loss spike: {mean_loss:.4f} is {spike_z:.0f} standard deviations above the recent "
                f"average {spikes.mean:.4f} (lr {lr:.2e}, gradient norm {grad_norm:.3g}); if it recurs, lower lr or "
                "raise warmup_steps")
        if step % options.log_every == 0 or step == options.steps or evaluate_now or spike_z is not None or overflow:
            record = {"step": step, "loss": mean_loss, "lr": lr, "tokens_per_s": window_tokens / max(window_time, 1e-9),
                      "grad_norm": grad_norm if not overflow else None}  # JSON has no inf
            if spike_z is not None:
                record["spike_z"] = spike_z
            if scaler.is_enabled():
                record["loss_scale"] = scaler.get_scale()
                if overflow:
                    record["skipped"] = True
            bar.set_postfix(loss=f"{mean_loss:.4f}", lr=f"{lr:.2e}", tok_s=f"{record['tokens_per_s']:,.0f}")
            window_tokens, window_time = 0, 0.0

        if evaluate_now:
            model.eval()
            with torch.no_grad():
                val = {k: float(v) for k, v in task.evaluate(loss_and_logits, "val", options.batch_size).items()}
            model.train()
            record = {**record, **{f"val_{k}": v for k, v in val.items()}}
            if val["loss"] < best_val:
                best_val, evals_since_best = val["loss"], 0
            else:
                evals_since_best += 1
            shown = ", ".join(f"val {k} {v:.4f}" for k, v in val.items())
            say(f"step {step}: train loss {mean_loss:.4f}, {shown}")
            stopped_early = dist.broadcast_flag(bool(options.patience) and evals_since_best >= options.patience,
                                                world)

        if record is not None and world.is_main:
            outputs.append_line(run_dir / METRICS, json.dumps(record))
        outputs.fault(f"after-step-{step}")  # a test's SIGKILL at an exact step (ANATOMY_FAULT)
        if step % options.save_every == 0 or step == options.steps or stopped_early:
            last_saved = save(step) or last_saved
        if stopped_early:
            say(f"early stop at step {step}: no better val loss in {options.patience} evaluations "
                f"(best {best_val:.4f})")
            break
    bar.close()

    # ---- the end: test set, summary, plot -----------------------------------------------------------------
    final_step = step if options.steps > start else start
    model.eval()
    with torch.no_grad():
        test = {k: float(v) for k, v in task.evaluate(loss_and_logits, "test", options.batch_size).items()}
    summary = {"steps": final_step, "best_val_loss": best_val, **{f"test_{k}": v for k, v in test.items()}}
    if init_val is not None:
        summary["init_val_loss"] = init_val  # fine-tuning: the checkpoint's val loss before the first step
    if task.name == "classify" and options.baselines and world.is_main:
        summary["baselines_test_accuracy"] = task.baselines()
    if world.is_main:
        outputs.write_atomic(run_dir / SUMMARY, json.dumps(summary, indent=2) + "\n")
        say("test: " + ", ".join(f"{k} {v:.4f}" for k, v in test.items())
            + ("" if "baselines_test_accuracy" not in summary else "; baselines (test accuracy): "
               + ", ".join(f"{k} {v:.4f}" for k, v in summary["baselines_test_accuracy"].items())))
        if options.plot:
            outputs.plot_losses(run_dir / METRICS, run_dir / PLOT, say)
    dist.barrier(world)
    dist.teardown(world)
    return TrainResult(run_dir, final_step, last_saved, stopped_early, summary)


# --------------------------------------------------------------------------------------------------- helpers
def _stderr(message: str) -> None:
    from tqdm.auto import tqdm

    tqdm.write(message, file=sys.stderr)
