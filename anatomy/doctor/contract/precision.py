"""Float islands: the precision the learner's module actually computed in, and what the check tolerates for it.

The doctor runs everything in float64, but real code computes parts in float32 on purpose (``softmax(x.float())``,
``qk.float()``, LayerNorm subclasses that cast to float32 and back, RoPE tables built in float32). Three things
follow, all here:

* :class:`Islands` (a ``TorchFunctionMode`` around every learner forward, ``CheckedModule.run``) notes the
  floating dtypes the module computed in, and when an op fails only because its tensors disagree in dtype (a float32
  input meeting the float64 parameters the doctor gave the module: ``mixed dtype``, ``expected both ... same
  dtype``) it runs the op again with its floating tensors in float64: a module that casts never crashes the check.
  The forward also runs with float64 as the default dtype (``torch.full(..., finfo.min)`` or ``torch.zeros``
  without a dtype follow the check's dtype, as they follow the training dtype in the author's runs).
* :func:`floor_for` turns the narrowest dtype seen into a relative tolerance floor (a few hundred of its epsilons:
  float32 gives ~4e-5, still far below the > 1e-3 the post's faults make).
* :func:`tol` is what every comparison uses: ``max(its float64 tolerance, the floor)``; the floor is set for the
  duration of one check (:func:`tolerating`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import cast

import torch
from torch.overrides import TorchFunctionMode

__anatomy_transparent__ = True  # the recorder looks through these frames to the learner's line
FLOOR: ContextVar[float] = ContextVar("anatomy_doctor_precision_floor", default=0.0)
EPS_FACTOR = 300.0  # the floor in epsilons of the narrowest dtype seen: float32's 1.2e-7 gives 3.6e-5
_DTYPE_WORDS = ("dtype", "scalar type", "Double", "same type")
_NO_DOUBLE = "got Double"  # an op without a float64 kernel says so


def tol(base: float) -> float:
    """``base`` (a float64 tolerance), raised to the floor of the precision the module computed in."""
    return max(base, FLOOR.get())


@contextmanager
def tolerating(floor: float) -> Iterator[None]:
    token = FLOOR.set(floor)
    try:
        yield
    finally:
        FLOOR.reset(token)


def floor_for(dtypes: set[torch.dtype]) -> float:
    """0 when the module computed in float64 only, else EPS_FACTOR epsilons of its narrowest floating dtype."""
    narrow = [d for d in dtypes if d.is_floating_point and d != torch.float64]
    if not narrow:
        return 0.0
    return EPS_FACTOR * max(torch.finfo(d).eps for d in narrow)


def _tensors(tree: object) -> Iterator[torch.Tensor]:
    if isinstance(tree, torch.Tensor):
        yield tree
    elif isinstance(tree, (list, tuple)):
        for item in tree:
            yield from _tensors(item)
    elif isinstance(tree, dict):
        for item in tree.values():
            yield from _tensors(item)


def _promote(tree: object, dtype: torch.dtype) -> object:
    if isinstance(tree, torch.Tensor):
        return tree.to(dtype) if tree.is_floating_point() and tree.dtype != dtype else tree
    if isinstance(tree, list):
        return [_promote(t, dtype) for t in tree]
    if isinstance(tree, tuple):
        return tuple(_promote(t, dtype) for t in tree)
    if isinstance(tree, dict):
        return {k: _promote(v, dtype) for k, v in tree.items()}
    return tree


class Islands(TorchFunctionMode):
    """Notes the floating dtypes results are computed in (``seen``); retries an op that failed on mixed floating
    dtypes with its floating tensors in the widest of them (``promoted`` counts the retries). In-place ops are
    never retried (a copy would lose the write)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: set[torch.dtype] = set()
        self.promoted = 0
        self.narrowed = 0  # ops with no float64 kernel, run in float32 (_narrowed)

    def __torch_function__(
        self,
        func: Callable[..., object],
        types: Collection[type],
        args: tuple[object, ...] = (),
        kwargs: dict[str, object] | None = None,
    ) -> object:
        kwargs = kwargs or {}
        try:
            out = func(*args, **kwargs)
        except RuntimeError as err:
            name = getattr(func, "__name__", "")
            floats = {t.dtype for t in _tensors((args, kwargs)) if t.is_floating_point()}
            if name.endswith("_") or not any(w in str(err) for w in _DTYPE_WORDS):
                raise
            if floats == {torch.float64} and _NO_DOUBLE in str(err):
                out = self._narrowed(func, args, kwargs, err)
            elif len(floats) < 2:
                raise
            else:
                widest = max(floats, key=lambda d: torch.finfo(d).bits)
                promoted_args = cast(tuple[object, ...], _promote(args, widest))  # _promote keeps the structure
                promoted_kwargs = cast(dict[str, object], _promote(kwargs, widest))
                out = func(*promoted_args, **promoted_kwargs)
                self.promoted += 1
        for t in _tensors(out):
            if t.is_floating_point():
                self.seen.add(t.dtype)
        return out

    def _narrowed(
        self, func: Callable[..., object], args: tuple[object, ...], kwargs: dict[str, object], err: RuntimeError
    ) -> object:
        """An op with no float64 kernel (``torch._grouped_mm`` in transformers' mixture-of-experts layers: "Expected
        mat_a to be Float32, BFloat16 or Float16 matrix, got Double") run in float32 and its result put back in
        float64: a float32 island, as a cast in the learner's code would make one (the floor follows)."""
        try:
            out = func(
                *cast(tuple[object, ...], _promote(args, torch.float32)),
                **cast(dict[str, object], _promote(kwargs, torch.float32)),
            )
        except RuntimeError:
            raise err from None
        self.seen.add(torch.float32)
        self.narrowed += 1
        return _promote(out, torch.float64)


@contextmanager
def islands(dtype: torch.dtype) -> Iterator[Islands]:
    """Run a learner's forward on ``dtype`` inputs: ``dtype`` as the default dtype, :class:`Islands` watching."""
    previous = torch.get_default_dtype()
    mode = Islands()
    torch.set_default_dtype(dtype if dtype in (torch.float32, torch.float64) else previous)
    try:
        with mode:
            yield mode
    finally:
        torch.set_default_dtype(previous)
