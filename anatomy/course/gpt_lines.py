"""Where a finding of the gpt exercise points: the learner's step read from the recorded forward (the second
add of the positions, the second scaling, the last slice of the targets, the loss, the head), the line that copies
the embedding into the head, the ``return``; and dropout switched off for a comparison in training mode."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

from anatomy.course import gpt_parts as gp
from anatomy.tracing.steps import MATMUL_OPS, SCALE_OPS, Step

ADDS = ("add", "__add__", "__radd__", "add_", "__iadd__")
DROPS = ("dropout", "dropout_", "feature_dropout", "alpha_dropout")
SLICES = ("__getitem__", "narrow", "roll", "select")
LOSSES = ("cross_entropy", "nll_loss")


def pointer(name: str, steps: list[Step], inside: Callable[[Step], bool]) -> Step | None:
    """The learner's step a finding ``name`` points at, read from the recorded forward: ``steps`` are the learner's
    (in their file, on the data), ``inside(step)`` says whether a block ran it."""
    within = [s.index for s in steps if inside(s)]
    first, end = (min(within), max(within)) if within else (1 << 30, -1)
    outside = [s for s in steps if not inside(s)]
    stream = [s for s in outside if s.outputs and tuple(s.outputs[0].shape) == (2, gp.T, gp.PROBE.d)]
    adds = [s for s in stream if s.op in ADDS]
    if name == "positions_missing":
        return next((s for s in outside if s.op == "embedding"), None)
    if name == "positions_added_twice":  # the model's own forward's last add (else the second): the one to remove
        own = [s for s in adds if s.module == ""]
        return own[-1] if own and len(adds) > 1 else (adds[1] if len(adds) > 1 else last(adds))
    if name == "positions_after_blocks":
        return next((s for s in adds if s.index > end), None)
    if name == "embedding_scaled_twice":
        scales = [s for s in stream if s.op in SCALE_OPS and s.index < first]
        return scales[-1] if scales else None
    if name == "targets_shifted_twice":
        return last_slice_of_targets(outside)
    if name in ("targets_not_shifted", "pads_in_loss"):
        return next((s for s in outside if s.op in LOSSES), None) or last(outside)
    return next((s for s in outside if s.op in MATMUL_OPS and makes_logits(s)), None)


def neutral_dropout(model: nn.Module) -> Any:
    """Dropout off in training mode: every ``nn.Dropout`` at p = 0 and ``F.dropout``/``torch.dropout`` the
    identity while the block runs (restored after)."""
    import torch.nn.functional as F

    @contextmanager
    def off() -> Iterator[None]:
        drops = [(m, m.p) for m in model.modules() if isinstance(m, nn.modules.dropout._DropoutNd)]
        saved = (F.dropout, torch.dropout)
        for m, _ in drops:
            m.p = 0.0
        vars(F)["dropout"] = vars(torch)["dropout"] = identity
        try:
            yield
        finally:
            vars(F)["dropout"], vars(torch)["dropout"] = saved
            for m, p in drops:
                m.p = p

    return off()


def identity(x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
    """Dropout at p = 0."""
    return x


def at(step: Step | None) -> tuple[int | None, str]:
    return (step.line, step.source) if step is not None and step.line else (None, "")


def last(steps: list[Step]) -> Step | None:
    """The last of ``steps`` (None: none)."""
    return steps[-1] if steps else None


def makes_logits(s: Step) -> bool:
    return bool(s.outputs) and tuple(s.outputs[0].shape)[-1:] == (gp.PROBE.v,) and len(s.outputs[0].shape) == 3


def head_line(steps: list[Step]) -> tuple[int | None, str]:
    """The learner's line that makes the logits (the head; else the last one that touches them)."""
    head = next((s for s in steps if s.op in MATMUL_OPS and makes_logits(s)), None)
    return at(head or last([s for s in steps if makes_logits(s)]))


def last_slice_of_targets(steps: list[Step]) -> Step | None:
    """The last slice of the targets (the recorder's second input, ``x1``) or of what was made from them."""
    seen, slices = {"x1"}, []
    for s in steps:
        if any(i.source in seen for i in s.inputs):
            seen.add(f"step {s.index}")
            if s.op in SLICES:
                slices.append(s)
    return slices[-1] if slices else None


def is_causal(mask: Any, t: int) -> bool:
    if not isinstance(mask, torch.Tensor) or tuple(mask.shape[-2:]) != (t, t):
        return False
    want = torch.ones(t, t, dtype=torch.bool).tril()
    rows = mask.detach().reshape(-1, t, t)
    rows = rows if rows.dtype == torch.bool else rows != 0
    return bool((rows == want).all())


def return_line(cls: Any) -> tuple[int | None, str]:
    from anatomy.course.compare import source_line

    return source_line(type("S", (), {"forward": cls.forward}), "forward", r"\breturn\b")


def copy_line(cls: Any, attr: str, file: str) -> tuple[int, str]:
    """The line of ``__init__`` that copies the embedding into the head (``copy_``, ``clone``, ``.data``...)."""
    try:
        lines, start = inspect.getsourcelines(cls.__init__)
    except (OSError, TypeError):
        return 0, ""
    for number, text in enumerate(lines, start=start):
        code = text.split("#")[0]
        if f"{attr}.weight" in code and any(w in code for w in ("copy_", "clone", ".data", "Parameter(", "detach")):
            return number, text.strip()
    return 0, ""
