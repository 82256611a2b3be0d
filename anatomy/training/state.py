"""A training run's state and its setup: everything the loop reads and changes, built once (new or resumed).

    options → task (data, tokenizer) → model → AdamW → [resume: weights, moments, RNG, counters, scaler]
    → the run folder claimed and locked (or the resumed branch made the run's) → fp16 scaler → DDP → compile

What makes ``--resume`` exact (bit-identical losses on CPU): the weights, AdamW's moments, the data sampler's
generator, torch's global RNG (dropout) and the step counter are all restored; the learning rate is a pure
function of the step; evaluation draws from its own generator and never touches the training ones.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import torch
from torch import nn

from anatomy.config import ModelConfig
from anatomy.data.tokenizers import Tokenizer
from anatomy.errors import CheckpointError
from anatomy.models import build_model
from anatomy.sizes import check_fits
from anatomy.training import checkpoint as ckpt
from anatomy.training import distributed as dist
from anatomy.training import run_dir as outputs
from anatomy.training.options import TrainOptions
from anatomy.training.resuming import check_data, check_optimizer
from anatomy.training.spikes import SpikeWatch
from anatomy.training.step import Stepper, autocast_for, make_optimizer, maybe_compile, to_device
from anatomy.training.tasks import make_task

if TYPE_CHECKING:
    from torch.nn.parallel import DistributedDataParallel

METRICS, SUMMARY, PLOT = "metrics.jsonl", "summary.json", "loss.png"


@dataclass
class RunState:
    """One run, as the loop sees it. ``start`` is the step it began (or resumed) at, ``step`` the last one taken;
    ``best_val``, ``evals_since_best`` (early stop), ``spikes`` and the scaler are saved in every checkpoint."""

    options: TrainOptions
    run_dir: Path
    world: dist.World
    device: torch.device
    say: Any  # a log line, said on the main process only
    task: Any
    model: nn.Module
    stepper: Stepper
    data_generator: torch.Generator
    training_record: dict[str, Any]
    spikes: SpikeWatch
    init: Any = None  # fine-tuning's start (training/finetune.py), or None
    start: int = 0
    step: int = 0
    best_val: float = math.inf
    evals_since_best: int = 0
    skipped_in_a_row: int = 0  # fp16: overflowing steps in a row
    last_saved: Path | None = None
    stopped_early: bool = False
    window_tokens: int = 0  # tokens/s counts training steps only, not evaluation or saving
    window_time: float = 0.0

    @property
    def optimizer(self) -> torch.optim.Optimizer:
        return self.stepper.optimizer

    @property
    def scaler(self) -> torch.amp.GradScaler:
        return self.stepper.scaler

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        return autocast_for(self.options.precision, self.device)

    def trainer_state(self) -> dict[str, Any]:
        """What ``trainer_state.json`` holds beside the step."""
        return {
            "best_val": self.best_val,
            "evals_since_best": self.evals_since_best,
            "spikes": self.spikes.state_dict(),
            **({"grad_scaler": self.scaler.state_dict()} if self.scaler.is_enabled() else {}),
        }


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


Resumed = tuple[Path, dict[str, Any]]  # a checkpoint directory and its saved state (resuming.load_training_state)


def setup(
    options: TrainOptions,
    model_overrides: dict[str, Any],
    run_dir: Path,
    resumed: Resumed | None,
    log: Callable[[str], None],
    lock: outputs.RunLock,
) -> RunState:
    """The run's state, from scratch or (``resumed`` = ``(checkpoint, its saved state)``) from a checkpoint; the
    run folder claimed and locked on the main process."""
    device = dist.device_for(options.device)
    world = dist.setup(device)

    def say(message: str) -> None:
        if world.is_main:
            log(message)

    if options.batch_size % (world.world_size * options.accumulate):
        raise ValueError(
            f"batch_size={options.batch_size} (the global batch) must be divisible by the number of "
            f"processes ({world.world_size}) times accumulate ({options.accumulate})"
        )
    task, init, config = _data_and_config(options, model_overrides, resumed)
    check_fits(
        config,
        options.batch_size // (world.world_size * options.accumulate),
        options.block_size,
        training=True,
        what="one training step",
        device=str(device),
        flags="batch_size (or accumulate=k to split it), block_size or the model's sizes",
    )
    torch.manual_seed(options.seed)
    model = build_model(config).to(device)
    if init is not None and init.state is not None:
        init.load_into(model, task, say)
    stepper = Stepper(
        model,
        make_optimizer(model, options, device),
        accumulate=options.accumulate,
        clip=options.grad_clip,
        device=device,
        world=world,
        # fp16 needs loss scaling (its range ends at 65504; small gradients underflow): the scaler
        # multiplies the loss, unscales the gradients before clipping, and skips a step whose
        # gradients overflowed, halving the scale.
        scaler=torch.amp.GradScaler(device.type, enabled=options.precision == "fp16"),
    )
    record: dict[str, Any] = {"options": options.to_dict(), "model_overrides": model_overrides}
    if task.data_digest:  # what the run trains on, by content: a resume on other text is refused
        record["data"] = dict(task.data_digest)
    if task.name == "classify":
        record["label_names"] = list(task.label_names)
    run = RunState(
        options,
        run_dir,
        world,
        device,
        say,
        task,
        model,
        stepper,
        torch.Generator().manual_seed(options.seed),
        record,
        SpikeWatch(options.spike_z, options.warmup_steps),
        init,
        last_saved=resumed[0] if resumed else None,
    )
    if resumed is not None:
        _restore(run, *resumed)
    _claim(run, resumed, lock)
    if resumed is not None and "grad_scaler" in resumed[1]["state"]:
        run.scaler.load_state_dict(resumed[1]["state"]["grad_scaler"])
    _distribute(run)
    return run


def _data_and_config(
    options: TrainOptions, model_overrides: dict[str, Any], resumed: Resumed | None
) -> tuple[Any, Any, ModelConfig]:
    """The task (its tokenizer the checkpoint's on resume), fine-tuning's start, and the model config, checked
    against the checkpoint's on resume."""
    tokenizer: Tokenizer | None = None
    last = resumed[0] if resumed is not None else None
    if last is not None:
        from anatomy.data.tokenizers import load_tokenizer

        tokenizer = load_tokenizer(last)
        ckpt.check_tokenizer(tokenizer, ckpt.load_config(last), last)  # before the corpus is encoded with it
    init = None
    if options.init_from:  # fine-tuning: the checkpoint fixes tokenizer and architecture (training/finetune.py)
        from anatomy.training import finetune

        init = (
            finetune.resumed_start(last, tokenizer, options)
            if last is not None and tokenizer is not None
            else finetune.load_start(options.init_from)
        )
        tokenizer = init.tokenizer
        init.check(options, model_overrides)
    task = make_task(options, tokenizer)
    if resumed is not None:
        check_data(task.data_digest, resumed[1]["training"].get("data"), resumed[0])
    config = init.config_for(task, options, model_overrides) if init else task.model_config(model_overrides)
    if last is not None:
        if config != ckpt.load_config(last):
            raise CheckpointError(
                f"{str(last / ckpt.CONFIG)!r} was saved with a different model config than "
                f"this run builds: {ckpt.config_diff(ckpt.load_config(last), config)}"
            )
    return task, init, config


def _restore(run: RunState, last: Path, saved: dict[str, Any]) -> None:
    """Weights, AdamW's moments, RNG and counters from the checkpoint ``last``."""
    ckpt.load_weights(run.model, last)
    check_optimizer(saved["optimizer"], run.optimizer, run.model, last)
    run.optimizer.load_state_dict(saved["optimizer"])
    restore_rng(saved["rng"], run.data_generator)
    run.start = run.step = int(saved["state"]["step"])
    run.best_val = float(saved["state"].get("best_val", math.inf))
    run.evals_since_best = int(saved["state"].get("evals_since_best", 0))
    if "spikes" in saved["state"]:
        run.spikes.load_state_dict(saved["state"]["spikes"])
    run.say(f"resuming {str(last)!r} at step {run.start}")


def _claim(run: RunState, resumed: Resumed | None, lock: outputs.RunLock) -> None:
    """The main process makes the folder the run's: a new run creates and locks it only now, after every check of
    the input; a resumed branch becomes the run's tip. Metrics past the start are cut."""
    if not run.world.is_main:
        return
    run_dir, options = run.run_dir, run.options
    if resumed is None:
        outputs.claim_run_dir(run_dir)
        lock.acquire()
        if ckpt.step_dirs(run_dir):  # another process trained here between our first look and the lock
            raise ValueError(f"--out {str(run_dir)!r} already holds a training run; continue it with --resume")
    else:
        last, saved = resumed
        if last.parent == run_dir / "checkpoints":  # this branch is now the run's: a crash before its first
            ckpt.set_latest(
                run_dir,
                last,
                {
                    k: v
                    for k, v in options.to_dict().items()  # save resumes it,
                    if saved["training"]["options"].get(k) != v
                },
            )  # not the old branch
        (run_dir / SUMMARY).unlink(missing_ok=True)  # a summary of steps past this point no longer holds
    outputs.truncate_metrics(run_dir / METRICS, after=run.start)


def _distribute(run: RunState) -> None:
    """DDP around the model when torchrun started several processes; ``torch.compile`` when asked."""
    stepper, options = run.stepper, run.options
    wrapped = dist.wrap(run.model, run.world, run.device)
    stepper.ddp = cast("DistributedDataParallel", wrapped) if run.world.active else None  # dist.wrap's DDP
    stepper.forward = wrapped
    stepper.autocast = run.autocast
    if options.compile:
        micro_batch = options.batch_size // run.world.world_size // options.accumulate
        probe = to_device(run.task.batch("train", torch.Generator().manual_seed(0), micro_batch), run.device)
        stepper.forward = maybe_compile(wrapped, probe, run.autocast, run.say)
