"""The bug zoo: the post's mistakes as named, switchable faults on top of correct components.

    from anatomy import pitfalls
    with pitfalls.inject(model, "no_scaling"):
        broken = model(ids).logits                 # the fault is active on this model only
    fixed = model(ids).logits                       # and gone again

A fault never edits a component's code or class: it shadows one attribute, method or sub-module on the
*instances* it targets and restores them on exit (an attention fault wraps one step of the module, on that instance:
components/wrapping.py, pitfalls/faults.py), so other instances of the same class stay correct while it is
active. Every pitfall the project knows is one record (``pitfalls/records.py``: the post's sentence, an explanation
in English and Chinese, where it usually hides, its severity, how the doctor finds it and the course hints at it);
:data:`FAULTS` is the records this zoo can switch on. The claims lab, the doctor and the course read the same
records.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from torch import nn

from anatomy.pitfalls import (
    catalog_attention,
    catalog_block,
    catalog_course,
    catalog_learners,
    catalog_model,
    records,
)
from anatomy.pitfalls.records import Pitfall

records.add(*catalog_attention.PITFALLS, *catalog_learners.PITFALLS, *catalog_block.PITFALLS)
records.add(*catalog_course.PITFALLS)  # the course's own (anatomy learn), pitfalls/catalog_course.py
records.add(*catalog_model.PITFALLS)  # between the blocks of a whole model (doctor/model/)

Fault = Pitfall  # the bug zoo's name for a record it can switch on


class _Zoo(Mapping[str, Pitfall]):
    """The records with an ``apply``, read live (a record registered later is in the zoo at once)."""

    def __getitem__(self, name: str) -> Pitfall:
        p = records.RECORDS.get(name)
        if p is None or p.apply is None:
            raise KeyError(name)
        return p

    def __iter__(self) -> Iterator[str]:
        return iter(records.zoo())

    def __len__(self) -> int:
        return len(records.zoo())

    def __repr__(self) -> str:
        return f"FAULTS({', '.join(self)})"


FAULTS: Mapping[str, Pitfall] = _Zoo()


def fault_names() -> list[str]:
    return list(FAULTS)


def apply(module: nn.Module, name: str, **params: Any) -> Callable[[], None]:
    """Activate fault ``name`` on ``module`` (and every matching sub-module); returns the function that undoes it."""
    if name not in FAULTS:
        raise ValueError(f"unknown fault {name!r}; valid names: {', '.join(FAULTS)}")
    if not isinstance(module, nn.Module):
        raise TypeError(f"module must be a torch.nn.Module, got {type(module).__name__}")
    fault = FAULTS[name]
    assert fault.apply is not None  # FAULTS holds the records with an apply
    unknown = set(params) - set(fault.defaults)
    if unknown:
        raise ValueError(f"fault {name!r} takes parameters {sorted(fault.defaults) or 'none'}, got {sorted(unknown)}")
    undo: list[Callable[[], None]] = []
    fault.apply(module, undo, **{**fault.defaults, **params})
    if not undo:
        raise ValueError(f"fault {name!r} found nothing to change in {type(module).__name__}")

    def remove() -> None:
        while undo:
            undo.pop()()

    return remove


@contextmanager
def inject(module: nn.Module, name: str, **params: Any) -> Iterator[nn.Module]:
    """Context manager form of :func:`apply`: the fault is active inside the block, removed on exit (or error)."""
    remove = apply(module, name, **params)
    try:
        yield module
    finally:
        remove()


__all__ = ["FAULTS", "Fault", "Pitfall", "apply", "fault_names", "inject", "records"]
