"""What a resume reads and may change: the saved options, checked field by field, and the words of the command line
checked against them (only ``RESUMABLE`` options may change; ``--preset`` must be the run's own)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields
from pathlib import Path
from typing import Any

from anatomy.errors import CheckpointError
from anatomy.training import checkpoint as ckpt
from anatomy.training.options import RESUMABLE, TrainOptions, resolve


def checked_resume(
    path: Path, changes: dict[str, Any] | None, preset: str | None, log: Callable[[str], None]
) -> tuple[Path, dict[str, Any], TrainOptions, dict[str, Any]]:
    """``(checkpoint, its saved state, the options to continue with, the model overrides)`` for resuming ``path``
    with ``changes`` (``RESUMABLE`` options only) and, when given, the ``preset`` the run must come from."""
    last = ckpt.resolve(path, log=log, need=ckpt.COMPLETE)
    saved = ckpt.load_training_state(last)
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
