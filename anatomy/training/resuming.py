"""What a resume reads and may change: the saved options, checked field by field, and the words of the command line
checked against them (only ``RESUMABLE`` options may change; ``--preset`` must be the run's own); the trainer,
optimizer and RNG state a checkpoint saved for it, each file checked before anything is restored."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields
from pathlib import Path
from typing import Any

import torch
from torch import nn

from anatomy.errors import CheckpointError
from anatomy.training import checkpoint as ckpt
from anatomy.training.checkpoint import OPTIMIZER, RNG, STATE, TOKENIZER, TRAINING, read_json
from anatomy.training.options import RESUMABLE, TrainOptions, resolve


def checked_resume(
    path: Path, changes: dict[str, Any] | None, preset: str | None, log: Callable[[str], None]
) -> tuple[Path, dict[str, Any], TrainOptions, dict[str, Any]]:
    """``(checkpoint, its saved state, the options to continue with, the model overrides)`` for resuming ``path``
    with ``changes`` (``RESUMABLE`` options only) and, when given, the ``preset`` the run must come from."""
    last = ckpt.resolve(path, log=log, need=ckpt.COMPLETE)
    saved = load_training_state(last)
    saved_options = saved_options_of(saved, last)
    saved_model = saved["training"]["model_overrides"]
    changes = dict(changes or {})
    pointer = ckpt.latest(path) if last.parent == path / "checkpoints" else None
    if pointer and pointer[0] == last.name:  # the branch's own changes (steps=60), unless given again now
        changes = {**{k: v for k, v in pointer[1].items() if k in RESUMABLE}, **changes}
    if preset is not None:  # the whole description must match, except what may change on resume
        options, model = resolve(preset, changes)
        wanted = {**{k: v for k, v in options.to_dict().items() if k not in RESUMABLE}, **model}
        have = {**{k: v for k, v in saved_options.to_dict().items() if k not in RESUMABLE}, **saved_model}
        differ = sorted(k for k in set(wanted) | set(have) if wanted.get(k) != have.get(k))
        if differ:
            raise CheckpointError(
                f"{str(last)!r} comes from another configuration than --preset {preset}: "
                + ", ".join(
                    f"{k}={have.get(k, '(preset default)')!r} there, {wanted.get(k, '(preset default)')!r} here"
                    for k in differ[:4]
                )
            )
        changes = {k: v for k, v in changes.items() if k in RESUMABLE}
    for key, value in changes.items():
        current = getattr(saved_options, key, saved_model.get(key))
        if key not in RESUMABLE and value != current:
            raise CheckpointError(
                f"{str(last)!r} was trained with {key}={current!r}; {key}={value!r} cannot change on resume "
                f"(only {', '.join(sorted(RESUMABLE))} can)"
            )
    options = TrainOptions(**{**saved_options.to_dict(), **{k: v for k, v in changes.items() if k in RESUMABLE}})
    return last, saved, options, saved_model


def saved_options_of(saved: dict[str, Any], last: Path) -> TrainOptions:
    """The run's ``TrainOptions`` from ``training.json``, every field present and known."""
    values = saved["training"]["options"]
    where = str(last / ckpt.TRAINING)
    known = {f.name: f.default for f in fields(TrainOptions)}
    unknown = sorted(set(values) - set(known))
    if unknown:
        raise CheckpointError(f"{where!r}: unknown option field(s) {', '.join(unknown)} in 'options'")
    missing = [k for k in known if k not in values]
    if missing:
        raise CheckpointError(
            f"{where!r}: option field(s) missing from 'options': "
            + ", ".join(f"{k!r} (would default to {known[k]!r})" for k in missing[:4])
        )
    try:
        return TrainOptions(**values)
    except (TypeError, ValueError) as err:
        raise CheckpointError(f"{where!r}: field of 'options': {err}") from None


def check_data(now: dict[str, str], saved: Any, last: Path, *, remedy: str = "") -> None:
    """Refuse to use ``last`` on other data than it was trained on (``saved``: its ``training.json``'s ``data``;
    ``now``: the task's): the same file name holding other text, even the same characters in another order, would
    silently end an exact resume (or give another split to evaluate). A checkpoint saved before the digest was
    recorded is not checked."""
    if saved is None or not now:
        return
    where = str(last / ckpt.TRAINING)
    if not isinstance(saved, dict) or not isinstance(saved.get("sha256"), str):
        raise CheckpointError(f"{where!r}: field 'data' should be an object with the data's 'sha256'")
    if saved.get("sha256") != now["sha256"]:
        kind = "corpus" if "corpus" in now else "dataset"
        name = now[kind]
        before = f" ({kind} {saved[kind]!r} then)" if saved.get(kind) not in (None, name) else ""
        raise CheckpointError(
            f"{kind} {name!r} is not the text {str(last)!r} was trained on{before}: sha256 {saved['sha256'][:16]} "
            f"then, {now['sha256'][:16]} now; "
            + (remedy or f"restore it to resume exactly, or train on the new text with init_from={str(last)!r}")
        )


def load_training_state(directory: Path) -> dict[str, Any]:
    """Everything but the weights of a training checkpoint: options, trainer state, optimizer and RNG state, each
    file checked by key and type here (``check_optimizer`` checks shapes against the model)."""
    for name in (TRAINING, STATE, OPTIMIZER, RNG):
        if not (directory / name).is_file():
            raise CheckpointError(f"{str(directory)!r} is not a training checkpoint: {name} is missing")
    if not (directory / TOKENIZER).is_file():
        raise CheckpointError(
            f"{str(directory / TOKENIZER)!r} is missing: a resume needs the tokenizer the run was trained with"
        )
    loaded = {}
    for name in (OPTIMIZER, RNG):
        try:
            loaded[name] = torch.load(directory / name, map_location="cpu", weights_only=True)
        except Exception as err:  # a truncated or foreign file: say which
            first = (str(err).strip().splitlines() or [""])[0][:200]
            raise CheckpointError(f"cannot read {str(directory / name)!r}: {first}") from None
    training, state, rng = read_json(directory / TRAINING), read_json(directory / STATE), loaded[RNG]
    for key, kind in (("options", dict), ("model_overrides", dict)):
        if not isinstance(training.get(key), kind):
            raise CheckpointError(f"{str(directory / TRAINING)!r}: field {key!r} is missing or not a JSON object")
    if not isinstance(state.get("step"), int) or isinstance(state["step"], bool) or state["step"] < 0:
        raise CheckpointError(
            f"{str(directory / STATE)!r}: field 'step' is missing or not a step number (got {state.get('step')!r})"
        )
    if not isinstance(rng, dict):
        raise CheckpointError(
            f"{str(directory / RNG)!r}: expected a dict of generator states, got {type(rng).__name__}"
        )
    for key in ("torch", "data"):
        value = rng.get(key)
        if not (isinstance(value, torch.Tensor) and value.dtype == torch.uint8 and value.dim() == 1):
            raise CheckpointError(
                f"{str(directory / RNG)!r}: key {key!r} is missing or not a generator state (a 1-D "
                f"uint8 tensor), got {type(value).__name__}"
            )
    return {"training": training, "state": state, "optimizer": loaded[OPTIMIZER], "rng": rng}


def check_optimizer(saved: Any, optimizer: torch.optim.Optimizer, model: nn.Module, directory: Path) -> None:
    """``optimizer.pt`` against the optimizer this run built: groups, parameter counts, and every state tensor's
    key and shape, so a mismatch is named here rather than as a size error at the first step."""
    where = str(directory / OPTIMIZER)
    if (
        not isinstance(saved, dict)
        or not isinstance(saved.get("state"), dict)
        or not isinstance(saved.get("param_groups"), list)
    ):
        raise CheckpointError(f"{where!r}: expected an optimizer state dict with 'state' and 'param_groups'")
    groups = optimizer.param_groups
    if len(saved["param_groups"]) != len(groups):
        raise CheckpointError(
            f"{where!r}: field 'param_groups' has {len(saved['param_groups'])} groups, this run's "
            f"AdamW has {len(groups)}"
        )
    names = {id(p): n for n, p in model.named_parameters()}
    params: list[tuple[Any, torch.Tensor]] = []
    for g, (theirs, ours) in enumerate(zip(saved["param_groups"], groups)):
        if not isinstance(theirs, dict) or len(theirs.get("params", ())) != len(ours["params"]):
            raise CheckpointError(
                f"{where!r}: field 'param_groups[{g}].params' lists "
                f"{len(theirs.get('params', ())) if isinstance(theirs, dict) else '?'} parameters, "
                f"this run's model has {len(ours['params'])} in that group"
            )
        params.extend(zip(theirs["params"], ours["params"]))
    by_index = dict(params)
    for index, entry in saved["state"].items():
        param = by_index.get(index)
        if param is None or not isinstance(entry, dict):
            raise CheckpointError(f"{where!r}: field 'state[{index}]' belongs to no parameter of this run's model")
        for key in ("step", "exp_avg", "exp_avg_sq"):
            if key not in entry:
                raise CheckpointError(f"{where!r}: field 'state[{index}].{key}' ({names.get(id(param))}) is missing")
        for key in ("exp_avg", "exp_avg_sq"):
            value = entry[key]
            if not isinstance(value, torch.Tensor) or tuple(value.shape) != tuple(param.shape):
                shape = tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
                raise CheckpointError(
                    f"{where!r}: field 'state[{index}].{key}' has shape {shape}, this run's "
                    f"parameter {names.get(id(param))!r} has {tuple(param.shape)}"
                )
