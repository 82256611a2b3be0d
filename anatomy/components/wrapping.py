"""Change what ONE module does, from outside: its method wrapped on that instance only, undoably.

The bug zoo's faults (``anatomy.pitfalls``) and the attention-weight recorder (``anatomy.inspection.weights``) use
this; no component imports it, and a module nobody wrapped runs its class's methods and nothing else. ::

    undo = wrap_method(attn, "attend", "change", lambda inner: lambda self, *a, scale, **kw: inner(self, *a,
                       scale=1.0, **kw))
    ...                  # attn, and only attn, attends with scale 1
    undo()               # the class's method again

A wrapper takes the function in place (``self`` first: the class's method, or the next wrapper's function) and
returns the function to call instead. The instance's attribute ``name`` then holds the class's method inside its
wrappers, bound to the instance (so ``copy.deepcopy`` binds the copy's, and a flat view rebinds it to itself).
Wrappers compose in the order of :data:`STEPS`, innermost first, whatever the order they came in; a second wrapper
of a step takes the place of the first until it is undone.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

Fn = Callable[..., Any]
Wrapper = Callable[[Fn], Fn]

STEPS = ("replace", "observe", "change")
"""``replace``: another function in place of the class's (it ignores ``inner``); ``observe``: something written
down, then the function in place called as it was; ``change``: the function in place called with other arguments, or
its result changed."""


def wrappers(obj: object, name: str) -> dict[str, Wrapper]:
    """The wrappers on ``obj``'s method ``name``, by step (empty when it runs its class's method)."""
    bound = obj.__dict__.get(name)
    return dict(getattr(getattr(bound, "__func__", None), "wrappers", {}))


def _install(obj: object, name: str, by_step: dict[str, Wrapper]) -> None:
    if not by_step:
        obj.__dict__.pop(name, None)
        return
    fn: Fn = getattr(type(obj), name)
    for step in STEPS:
        if step in by_step:
            fn = by_step[step](fn)
    inner = fn

    def composed(self: Any, *args: Any, **kwargs: Any) -> Any:
        return inner(self, *args, **kwargs)

    composed.wrappers = by_step  # type: ignore[attr-defined]  # read back by ``wrappers``
    obj.__dict__[name] = types.MethodType(composed, obj)


def wrap_method(obj: object, name: str, step: str, wrapper: Wrapper) -> Callable[[], None]:
    """Wrap ``obj``'s method ``name`` at ``step`` (one of :data:`STEPS`); returns the function that puts back what
    that step held before."""
    if step not in STEPS:
        raise ValueError(f"step must be one of {', '.join(STEPS)}, got {step!r}")
    if not callable(getattr(type(obj), name, None)):
        raise ValueError(f"{type(obj).__name__} has no method {name!r} to wrap")
    by_step = wrappers(obj, name)
    old = by_step.get(step)
    by_step[step] = wrapper
    _install(obj, name, by_step)

    def undo() -> None:
        now = wrappers(obj, name)
        if old is None:
            now.pop(step, None)
        else:
            now[step] = old
        _install(obj, name, now)

    return undo
