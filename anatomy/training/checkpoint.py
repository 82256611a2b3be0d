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
place with ``os.replace`` and its parent fsynced, and ``checkpoints/latest.json`` (``{"checkpoint":
"step-000500", "changes": {}}``) is replaced the same way. A directory named ``step-*`` is therefore always
complete; a crash before the rename leaves only a ``.tmp-*`` directory, which the next save removes, and a failed
save (a full disk) removes it at once.
Pruning renames an old ``step-*`` to ``.trash-*`` before deleting it. ``latest.json`` names the tip of the branch
last trained: resuming from an earlier checkpoint points it there at once, with the options the resume changed
(``steps=60``), so a crash before the branch's first save still resumes the branch, not the newer checkpoints of the
run it left.

The weights go through ``anatomy.interop.safetensors_io.save_pretrained`` / ``load_pretrained`` (one copy of
each tied tensor, re-tied on load; never pickle), so every checkpoint directory is also a ``save_pretrained``
directory.
"""

from __future__ import annotations

import io
import json
import logging
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from anatomy.config import ModelConfig
from anatomy.data.tokenizers import OurSpecials, Tokenizer, load_tokenizer
from anatomy.errors import CheckpointError
from anatomy.interop.safetensors_io import (
    INDEX_NAME,
    config_from,
    load_pretrained,
    read_config,
    save_pretrained,
)
from anatomy.interop.tensor_files import os_error_from
from anatomy.training.run_dir import fault, fsync_dir, write_atomic

CONFIG, WEIGHTS, TRAINING, STATE, OPTIMIZER, RNG = (
    "config.json",
    "model.safetensors",
    "training.json",
    "trainer_state.json",
    "optimizer.pt",
    "rng.pt",
)
PREFIX, LATEST, TOKENIZER = "step-", "latest.json", "tokenizer.json"
COMPLETE = (CONFIG, WEIGHTS, TOKENIZER, TRAINING, STATE, OPTIMIZER, RNG)  # what every step-* holds: resume needs all
LOADABLE = (CONFIG, WEIGHTS)  # what the loaders (generate, evaluate, viz) need


# -------------------------------------------------------------------------------------------------- weights
def config_of(model: nn.Module) -> ModelConfig:
    """The ``ModelConfig`` every model of ours carries as ``model.config`` (``build_model`` sets it)."""
    config = getattr(model, "config", None)
    if not isinstance(config, ModelConfig):
        raise TypeError(f"{type(model).__name__} has no ModelConfig as .config: not a model of anatomy.models")
    return config


def load_weights(model: nn.Module, directory: Path) -> None:
    """Copy the weights of the checkpoint in ``directory`` (``anatomy.load_pretrained``) into ``model``."""
    try:
        loaded = load_pretrained(directory)
    except (TypeError, ValueError) as err:
        raise CheckpointError(str(err)) from None
    if config_of(loaded) != config_of(model):
        raise CheckpointError(
            f"{str(Path(directory) / CONFIG)!r} holds a model of another config than this run "
            f"builds: {config_diff(config_of(loaded), config_of(model))}"
        )
    model.load_state_dict(loaded.state_dict())


# ----------------------------------------------------------------------------------------------- atomic write
def _fsync_file(path: Path) -> None:
    with open(path, "rb+") as f:
        os.fsync(f.fileno())


def _step(path: Path) -> int:
    return int(path.name[len(PREFIX) :])


def missing_files(directory: Path, need: tuple[str, ...] = COMPLETE) -> list[str]:
    """The files of ``need`` that ``directory`` lacks (the weights may be sharded)."""
    have = {p.name for p in directory.iterdir()} if directory.is_dir() else set()
    weights = WEIGHTS in have or INDEX_NAME in have
    return [name for name in need if name not in have and not (name == WEIGHTS and weights)]


def _candidates(run_dir: Path) -> list[Path]:
    root = Path(run_dir) / "checkpoints"
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.is_dir() and p.name.startswith(PREFIX) and p.name[len(PREFIX) :].isdigit()]
    return sorted(found, key=_step)


def step_dirs(run_dir: Path, need: tuple[str, ...] = COMPLETE) -> list[Path]:
    """Complete checkpoints of a run, oldest first (a ``step-*`` missing a file is skipped: ``incomplete_dirs``)."""
    return [p for p in _candidates(run_dir) if not missing_files(p, need)]


def incomplete_dirs(run_dir: Path, need: tuple[str, ...] = COMPLETE) -> dict[Path, list[str]]:
    """``{step-* directory: the files of need it lacks}``: left by a tool that deleted files one by one, never by
    us (pruning renames a checkpoint before deleting it)."""
    return {p: missing for p in _candidates(run_dir) if (missing := missing_files(p, need))}


def _named(err: OSError, path: Path) -> OSError:
    """The same error with ``path`` as its file name when the OS did not give one (a failed write or fsync)."""
    return err if err.filename else OSError(err.errno, err.strerror or str(err), str(path))


def save_checkpoint(
    run_dir: Path,
    step: int,
    *,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    tokenizer: Tokenizer,
    training: dict[str, Any],
    trainer_state: dict[str, Any],
    rng: dict[str, torch.Tensor],
    keep_last: int,
) -> Path:
    """Write ``run_dir/checkpoints/step-NNNNNN`` atomically, point ``checkpoints/latest.json`` at it, then keep only the
    last ``keep_last`` of its branch. On any failure (a full disk, Ctrl-C) the temporary directory is removed and
    the previous checkpoints are untouched."""
    root = Path(run_dir) / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"{PREFIX}{step:06d}"
    tmp = root / f".tmp-{final.name}-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    writing = tmp  # the file being written, named when the disk fills up under it
    try:
        tmp.mkdir()
        writing = tmp / WEIGHTS
        save_pretrained(model, tmp)  # config.json + model.safetensors
        writing = tmp / TOKENIZER
        tokenizer.save(tmp)
        for name, text in (
            (TRAINING, json.dumps(training, indent=2, sort_keys=True)),
            (STATE, json.dumps({**trainer_state, "step": step}, indent=2, sort_keys=True)),
        ):
            writing = tmp / name
            writing.write_text(text + "\n", encoding="utf-8")
        for name, obj in ((OPTIMIZER, optimizer.state_dict()), (RNG, rng)):
            writing = tmp / name
            buffer = io.BytesIO()  # torch.save straight to a full disk says only "unexpected pos": write it ourselves
            torch.save(obj, buffer)
            writing.write_bytes(buffer.getbuffer())
        writing = tmp
        for f in tmp.iterdir():
            _fsync_file(f)
        fsync_dir(tmp)
    except OSError as err:
        shutil.rmtree(tmp, ignore_errors=True)
        raise _named(err, writing) from None
    except BaseException as err:
        shutil.rmtree(tmp, ignore_errors=True)
        os_error = os_error_from(err, writing)
        if os_error is not None:
            raise os_error from None
        raise
    if final.exists():  # the same step saved again (a resumed run): move the old one aside first
        old = root / f".old-{final.name}-{os.getpid()}"
        os.replace(final, old)
        os.replace(tmp, final)
        shutil.rmtree(old)
    else:
        os.replace(tmp, final)
    fsync_dir(root)
    set_latest(run_dir, final)
    prune(run_dir, keep_last, current=step)
    return final


def set_latest(run_dir: Path, checkpoint: Path, changes: dict[str, Any] | None = None) -> None:
    """Point ``run_dir/checkpoints/latest.json`` at ``checkpoint`` (atomically): the tip of the branch being trained,
    with the resumable options a resume changed on top of the checkpoint's own (``{"steps": 60}``)."""
    root = Path(run_dir) / "checkpoints"
    write_atomic(
        root / LATEST, json.dumps({"checkpoint": checkpoint.name, "changes": changes or {}}, sort_keys=True) + "\n"
    )
    fsync_dir(root)


def latest(run_dir: Path) -> tuple[str, dict[str, Any]] | None:
    """``(directory name, option changes)`` of ``checkpoints/latest.json``; None for a run without one."""
    pointer = Path(run_dir) / "checkpoints" / LATEST
    if not pointer.is_file():
        return None
    data = read_json(pointer)
    name, changes = data.get("checkpoint"), data.get("changes", {})
    if not (
        isinstance(name, str)
        and name.startswith(PREFIX)
        and name[len(PREFIX) :].isdigit()
        and isinstance(changes, dict)
    ):
        raise CheckpointError(
            f"{str(pointer)!r}: field 'checkpoint' should name a {PREFIX}NNNNNN directory and "
            "'changes' be an object; give the checkpoint directory to use instead of the run"
        )
    return name, changes


def _remove(directory: Path) -> None:
    """Delete a directory moved to a trash name, file by file (the fault point sits after the first file)."""
    for i, f in enumerate(sorted(directory.iterdir())):
        if f.is_dir():
            shutil.rmtree(f)
        else:
            f.unlink()
        if i == 0:
            fault("prune")
    directory.rmdir()


def prune(run_dir: Path, keep_last: int, *, current: int | None = None) -> None:
    """Remove all but the last ``keep_last`` checkpoints up to step ``current`` (later ones belong to a branch left
    behind by a resume from an earlier checkpoint; a save of their step replaces them), and the leftovers of
    interrupted saves and prunes. Each old ``step-*`` is first renamed to ``.trash-*``: a kill while deleting
    leaves a trash directory, never an incomplete ``step-*``."""
    root = Path(run_dir) / "checkpoints"
    lineage = [p for p in step_dirs(run_dir) if current is None or _step(p) <= current]
    trash = []
    for old in lineage[:-keep_last]:
        moved = root / f".trash-{old.name}-{os.getpid()}"
        os.replace(old, moved)
        trash.append(moved)
    if trash:
        fsync_dir(root)
    for moved in trash:
        try:
            _remove(moved)
        except BaseException:  # Ctrl-C while deleting: finish it, then stop
            shutil.rmtree(moved, ignore_errors=True)
            raise
    for p in root.iterdir():
        if p.name.startswith((".tmp-", ".old-", ".trash-")) and not p.name.endswith(f"-{os.getpid()}"):
            shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)


# ------------------------------------------------------------------------------------------------------- load
def _say(log: Callable[[str], None] | None, message: str) -> None:
    (log or logging.getLogger("anatomy").warning)(message)


def resolve(path: str | Path, *, log: Callable[[str], None] | None = None, need: tuple[str, ...] = LOADABLE) -> Path:
    """A checkpoint directory, or a run directory → the checkpoint ``checkpoints/latest.json`` names (the branch last
    trained), else its newest complete one: holding the files of ``need`` (the weights for the loaders, every file
    for resume). Incomplete ``step-*`` directories are skipped and named (``log``, else a warning of the
    ``anatomy`` logger)."""
    path = Path(path)
    if not path.is_dir():
        raise CheckpointError(f"checkpoint directory {str(path)!r} does not exist")
    if (path / CONFIG).is_file() and ((path / WEIGHTS).is_file() or (path / INDEX_NAME).is_file()):
        return path
    skipped = incomplete_dirs(path, need)
    for bad, missing in skipped.items():
        _say(log, f"skipping {str(bad)!r}: an incomplete checkpoint ({', '.join(missing)} missing)")
    steps = step_dirs(path, need)
    if not steps:
        if (path / CONFIG).is_file():
            raise CheckpointError(
                f"{str(path)!r} holds {CONFIG} but no {WEIGHTS} (the weights): an incomplete checkpoint"
            )
        if skipped:  # name what the newest one lacks, file by file
            newest = max(skipped, key=_step)
            older = f"; {len(skipped) - 1} older checkpoint(s) are incomplete too" if len(skipped) > 1 else ""
            raise CheckpointError(
                ", ".join(f"{str(newest / name)!r}" for name in skipped[newest])
                + f" {'is' if len(skipped[newest]) == 1 else 'are'} missing: {str(path)!r} holds "
                f"no complete checkpoint{older}"
            )
        raise CheckpointError(
            f"{str(path)!r} holds no checkpoint (expected {CONFIG} and {WEIGHTS}, or "
            f"checkpoints/{PREFIX}NNNNNN/ from `anatomy train`)"
        )
    pointer, found = path / "checkpoints" / LATEST, latest(path)
    if found is None:
        return steps[-1]
    name = found[0]
    chosen = path / "checkpoints" / name
    if chosen in steps:
        return chosen
    before = [p for p in steps if _step(p) <= int(name[len(PREFIX) :])]
    if not before:
        raise CheckpointError(
            f"{str(pointer)!r} names {name}, which is missing or incomplete, and no complete "
            "checkpoint precedes it; give the checkpoint directory to use instead of the run"
        )
    _say(
        log,
        f"{str(pointer)!r} names {name}, which is missing or incomplete; using {before[-1].name}, the newest "
        "complete checkpoint before it",
    )
    return before[-1]


def read_json(path: Path) -> dict[str, Any]:
    from anatomy.files import BadJSON
    from anatomy.files import read_json as read_bounded

    try:
        data: dict[str, Any] = read_bounded(path)  # bounded, depth-checked, one line (anatomy.files)
    except FileNotFoundError:
        raise CheckpointError(f"{str(path)!r} is missing") from None
    except BadJSON as err:
        raise CheckpointError(str(err)) from None
    return data


def load_config(ckpt: Path) -> ModelConfig:
    return config_from(read_config(ckpt), ckpt / CONFIG)


def config_diff(have: ModelConfig, want: ModelConfig) -> str:
    """``"d_model=32 there, 64 here; ..."``: the fields where two configs differ."""
    a, b = have.to_dict(), want.to_dict()
    differ = [k for k in a if a[k] != b.get(k)]
    shown = "; ".join(f"{k}={a[k]!r} there, {b.get(k)!r} here" for k in differ[:4])
    return shown + ("; ..." if len(differ) > 4 else "")


def check_tokenizer(tokenizer: Tokenizer, config: ModelConfig, ckpt: Path) -> None:
    """The tokenizer saved beside the weights must be the one they were trained with: one that emits ids beyond the
    embedding table would fail at the first such token, and one of ours (character, BPE) of another size than
    ``vocab_size`` is another run's (a run's ``vocab_size`` is its tokenizer's). Only a Hugging Face tokenizer may be
    smaller: converted models pad their embedding tables (Qwen, GPT-NeoX)."""
    size, where = tokenizer.vocab_size, str(ckpt / TOKENIZER)
    if size > config.vocab_size:
        raise CheckpointError(
            f"{where!r}: the tokenizer has {size} tokens but {CONFIG} says "
            f"vocab_size={config.vocab_size}; ids from {config.vocab_size} on have no embedding row"
        )
    if size < config.vocab_size and isinstance(tokenizer, OurSpecials):
        raise CheckpointError(
            f"{where!r}: the tokenizer has {size} tokens but {CONFIG} says "
            f"vocab_size={config.vocab_size}; a run's vocab_size is its tokenizer's, so this "
            "tokenizer is not the one these weights were trained with"
        )


def load_model(path: str | Path, *, device: str | torch.device = "cpu") -> tuple[nn.Module, Tokenizer, Path]:
    """``(model in eval mode, tokenizer, checkpoint dir)`` from a checkpoint or run directory."""

    ckpt = resolve(path)
    try:
        model = load_pretrained(ckpt)
    except (TypeError, ValueError) as err:
        raise CheckpointError(str(err)) from None
    tokenizer = load_tokenizer(ckpt)
    check_tokenizer(tokenizer, config_of(model), ckpt)
    return model.to(device).eval(), tokenizer, ckpt
