"""What a function exercise is graded with: a probe :class:`Call` (float64 inputs whose named sizes all differ, so
a shape says which axis is which) and a :class:`Pitfall` (a named wrong implementation, with what the course says
of it and where it points in the learner's code)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from anatomy.tracing.steps import Recording

SIZES = {"B": 2, "H": 3, "T": 5, "S": 7, "Dh": 4, "D": 12}


@dataclass(frozen=True)
class Call:
    entry: str
    args: tuple[Any, ...]  # the probe's inputs: tensors, and sizes as ints
    dims: tuple[str, ...] = ()  # legend letters of each tensor argument, for the recorder


@dataclass(frozen=True)
class Pitfall:
    name: str
    what: tuple[str, str]  # what the code does, (en, zh)
    post: tuple[str, str]  # the post's sentence it breaks, (zh, en)
    hint: tuple[str, str]
    variant: Callable[
        [str], Callable[..., Any] | None
    ]  # entry name -> the wrong implementation of that entry (others: the reference)
    ops: tuple[str, ...]  # where to point: the first recorded step with one of these ops...
    out_dims: tuple[str, ...] | None = None  # ...whose output has these dims (None: any)
    text: str = ""  # ...else the first line of the entry's source matching this regex (code the recorder cannot
    # see: Python arithmetic, tensors made from numbers alone)
    unmasked: bool = False  # judged on the calls without a mask (the fill value a learner picks does not matter)


# one probe call run: the call, the learner's outputs, the reference's, the learner's recording
Run = tuple[Call, list[Any], list[Any], Recording | None]


def _g(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def from_record(
    name: str, variant: Callable[[str], Callable[..., Any] | None], ops: tuple[str, ...], text: str = "", **kw: Any
) -> Pitfall:
    """A course pitfall whose words (what it does, the post's sentence, the hint) are its record's
    (``anatomy.pitfalls.records``), or the course's own for the few no record holds yet (``block_words.WORDS``):
    a pitfall is said in one place."""
    from anatomy.course.block_words import WORDS
    from anatomy.pitfalls import records

    r = records.get(name)
    if r is not None and r.hint_en is not None and r.hint_zh is not None:
        what, post, hint = (r.summary_en, r.summary_zh), (r.post_zh or "", ""), (r.hint_en, r.hint_zh)
    elif name in WORDS:
        en, zh, post, hint_en, hint_zh = WORDS[name]
        what, hint = (en, zh), (hint_en, hint_zh)
    else:
        raise ValueError(f"no words for the course pitfall {name!r}")
    return Pitfall(name, what, post, hint, variant, ops, text=text, **kw)
