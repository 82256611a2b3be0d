"""Checkpoints: one directory per saved step, written so that a crash at any instant leaves the previous one intact.

Layout of ``RUN/checkpoints/step-000500/``::

    config.json          the ModelConfig          ┐ written by save_pretrained: the directory is also
    model.safetensors    the weights (no pickle)  ┘ loadable by load_pretrained
    tokenizer.json       the tokenizer (tokenizers' own format for BPE)
    training.json        the options and model overrides the run was started with
    trainer_state.json   step, early-stop and loss-spike-watch state, fp16 loss scale
    optimizer.pt         AdamW's state dict: tensors and numbers only, loaded with ``weights_only=True``
    rng.pt               torch's global RNG, the data sampler's generator (and CUDA's), tensors only

Atomicity: every file is written into ``.tmp-step-000500-PID/`` and fsynced, then the directory is renamed into
place with ``os.replace`` and its parent fsynced. A directory named ``step-*`` is therefore always complete; a
crash before the rename leaves only a ``.tmp-*`` directory, which the next save removes.

The weights go through ``anatomy.interop.safetensors_io.save_pretrained`` / ``load_pretrained`` (one copy of
each tied tensor, re-tied on load; never pickle), so every checkpoint directory is also a ``save_pretrained``
directory.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import torch
from torch import nn

from anatomy.config import ModelConfig
from anatomy.interop.safetensors_io import load_pretrained, read_config, save_pretrained

CONFIG, WEIGHTS, TRAINING, STATE, OPTIMIZER, RNG = ("config.json", "model.safetensors", "training.json",
                                                    "trainer_state.json", "optimizer.pt", "rng.pt")
PREFIX = "step-"


class CheckpointError(ValueError):
    """A checkpoint directory that is missing, incomplete or does not match the run."""


# -------------------------------------------------------------------------------------------------- weights
def load_weights(model: nn.Module, directory: Path) -> None:
    """Copy the weights of the checkpoint in ``directory`` (``anatomy.load_pretrained``) into ``model``."""
    try:
        loaded = load_pretrained(directory)
    except (TypeError, ValueError) as err:
        raise CheckpointError(str(err)) from None
    if loaded.config != model.config:
        raise CheckpointError(f"{str(directory)!r} holds a model of another config than this run builds")
    model.load_state_dict(loaded.state_dict())


# ----------------------------------------------------------------------------------------------- atomic write
def _fsync_file(path: Path) -> None:
    with open(path, "rb+") as f:
        os.fsync(f.fileno())


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def step_dirs(run_dir: Path) -> list[Path]:
    """Complete checkpoints of a run, oldest first."""
    root = Path(run_dir) / "checkpoints"
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.is_dir() and p.name.startswith(PREFIX) and p.name[len(PREFIX):].isdigit()]
    return sorted(found, key=lambda p: int(p.name[len(PREFIX):]))


def save_checkpoint(run_dir: Path, step: int, *, model: nn.Module, optimizer: torch.optim.Optimizer,
                    tokenizer, training: dict[str, Any], trainer_state: dict[str, Any],
                    rng: dict[str, torch.Tensor], keep_last: int) -> Path:
    """Write ``run_dir/checkpoints/step-NNNNNN`` atomically, then keep only the last ``keep_last``."""
    root = Path(run_dir) / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"{PREFIX}{step:06d}"
    tmp = root / f".tmp-{final.name}-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    save_pretrained(model, tmp)  # config.json + model.safetensors
    tokenizer.save(tmp)
    (tmp / TRAINING).write_text(json.dumps(training, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    (tmp / STATE).write_text(json.dumps({**trainer_state, "step": step}, indent=2, sort_keys=True) + "\n",
                             encoding="utf-8")
    torch.save(optimizer.state_dict(), tmp / OPTIMIZER)
    torch.save(rng, tmp / RNG)
    for f in tmp.iterdir():
        _fsync_file(f)
    _fsync_dir(tmp)
    if final.exists():  # the same step saved again (a resumed run): move the old one aside first
        old = root / f".old-{final.name}-{os.getpid()}"
        os.replace(final, old)
        os.replace(tmp, final)
        shutil.rmtree(old)
    else:
        os.replace(tmp, final)
    _fsync_dir(root)
    prune(run_dir, keep_last)
    return final


def prune(run_dir: Path, keep_last: int) -> None:
    """Remove all but the last ``keep_last`` checkpoints and leftovers of interrupted saves of other processes."""
    for old in step_dirs(run_dir)[:-keep_last]:
        shutil.rmtree(old)
    root = Path(run_dir) / "checkpoints"
    for p in root.iterdir():
        if p.name.startswith((".tmp-", ".old-")) and not p.name.endswith(f"-{os.getpid()}"):
            shutil.rmtree(p, ignore_errors=True)


# ------------------------------------------------------------------------------------------------------- load
def resolve(path: str | Path) -> Path:
    """A checkpoint directory, or a run directory (→ its latest checkpoint)."""
    path = Path(path)
    if not path.is_dir():
        raise CheckpointError(f"checkpoint directory {str(path)!r} does not exist")
    if (path / CONFIG).is_file() and (path / WEIGHTS).is_file():
        return path
    steps = step_dirs(path)
    if not steps:
        raise CheckpointError(f"{str(path)!r} holds no checkpoint (expected {CONFIG} and {WEIGHTS}, or "
                              f"checkpoints/{PREFIX}NNNNNN/ from `anatomy train`)")
    return steps[-1]


def read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CheckpointError(f"{str(path)!r} is missing") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise CheckpointError(f"{str(path)!r} is not valid JSON: {err}") from None


def load_config(ckpt: Path) -> ModelConfig:
    try:
        return ModelConfig.from_dict(read_config(ckpt)["config"])
    except (TypeError, ValueError, KeyError) as err:
        raise CheckpointError(f"{str(ckpt / CONFIG)!r} is not a valid anatomy model config: {err}") from None


def load_model(path: str | Path, *, device: str | torch.device = "cpu") -> tuple[nn.Module, Any, Path]:
    """``(model in eval mode, tokenizer, checkpoint dir)`` from a checkpoint or run directory."""
    from anatomy.data.tokenizers import load_tokenizer

    ckpt = resolve(path)
    try:
        model = load_pretrained(ckpt)
    except (TypeError, ValueError) as err:
        raise CheckpointError(str(err)) from None
    return model.to(device).eval(), load_tokenizer(ckpt), ckpt


def load_training_state(ckpt: Path) -> dict[str, Any]:
    """Everything but the weights of a training checkpoint: options, trainer state, optimizer and RNG state."""
    for name in (TRAINING, STATE, OPTIMIZER, RNG):
        if not (ckpt / name).is_file():
            raise CheckpointError(f"{str(ckpt)!r} is not a training checkpoint: {name} is missing")
    try:
        optimizer = torch.load(ckpt / OPTIMIZER, map_location="cpu", weights_only=True)
        rng = torch.load(ckpt / RNG, map_location="cpu", weights_only=True)
    except Exception as err:  # a truncated or foreign file: say which
        raise CheckpointError(f"cannot read the optimizer/RNG state in {str(ckpt)!r}: {err}") from None
    return {"training": read_json(ckpt / TRAINING), "state": read_json(ckpt / STATE), "optimizer": optimizer,
            "rng": rng}
