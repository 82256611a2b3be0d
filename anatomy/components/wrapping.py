"""Change what ONE module does, from outside: a method wrapped on that instance only, undoably.

The bug zoo's faults (``anatomy.pitfalls``) and the attention-weight recorder (``anatomy.inspection.weights``) use
this; no component imports it, and a module nobody wrapped runs its class's methods and nothing else. ::

    def unscaled(inner):
        return lambda self, *args, scale, **kw: inner(self, *args, scale=1.0, **kw)

    undo = wrap_method(attn, "attend", "change", unscaled)
    ...                  # attn, and only attn, attends with scale 1
    undo()               # attn is a plain instance of its class again

A wrapper takes the function in place (``self`` first: the class's method, or the next wrapper's function) and
returns the function to call instead. It is kept in the instance's attribute ``_<name>__<step>``, and the instance's
class becomes a subclass of its own (made once per class and set of names, named like it) whose method ``name``
calls the original class's inside the instance's wrappers. So ``copy.deepcopy`` copies the change with the
instance, a flat view of the instance runs it, and two changes of different steps shadow different attributes.
Wrappers compose in the order of :data:`STEPS`, innermost first, whatever the order they came in; a second wrapper
of a step takes the place of the first until it is undone.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Fn = Callable[..., Any]
Wrapper = Callable[[Fn], Fn]

STEPS = ("replace", "observe", "change")
"""``replace``: another function in place of the class's (it ignores ``inner``); ``observe``: something written
down, then the function in place called as it was; ``change``: the function in place called with other arguments, or
its result changed."""

_SUBCLASSES: dict[tuple[type, frozenset[str]], type] = {}


def _slot(name: str, step: str) -> str:
    return f"_{name}__{step}"


def wrappers(obj: object, name: str) -> dict[str, Wrapper]:
    """The wrappers on ``obj``'s method ``name``, by step (empty when it runs its class's method)."""
    return {step: obj.__dict__[_slot(name, step)] for step in STEPS if _slot(name, step) in obj.__dict__}


def _dispatch(base: type, name: str) -> Fn:
    original: Fn = getattr(base, name)

    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        fn = original
        for step in STEPS:
            wrapper = self.__dict__.get(_slot(name, step))
            if wrapper is not None:
                fn = wrapper(fn)
        return fn(self, *args, **kwargs)

    method.__name__ = method.__qualname__ = name
    return method


def _subclass(base: type, names: frozenset[str]) -> type:
    """``base`` with methods ``names`` dispatching to an instance's wrappers (made once per class and names)."""
    hit = _SUBCLASSES.get((base, names))
    if hit is None:
        namespace: dict[str, Any] = {name: _dispatch(base, name) for name in names}
        namespace.update(__module__=base.__module__, __qualname__=base.__qualname__, _unwrapped=base)
        hit = _SUBCLASSES[(base, names)] = type(base.__name__, (base,), namespace)
    return hit


def _settle(obj: Any) -> None:
    """Give ``obj`` the class its wrappers need: its own class when none is left."""
    base: type = getattr(type(obj), "_unwrapped", type(obj))
    slots = (key[1:].rpartition("__") for key in obj.__dict__ if key.startswith("_"))
    names = frozenset(name for name, _, step in slots if step in STEPS and name)
    obj.__class__ = _subclass(base, names) if names else base


def wrap_method(obj: Any, name: str, step: str, wrapper: Wrapper) -> Callable[[], None]:
    """Wrap ``obj``'s method ``name`` at ``step`` (one of :data:`STEPS`); returns the function that puts back what
    that step held before."""
    if step not in STEPS:
        raise ValueError(f"step must be one of {', '.join(STEPS)}, got {step!r}")
    if not callable(getattr(type(obj), name, None)):
        raise ValueError(f"{type(obj).__name__} has no method {name!r} to wrap")
    slot = _slot(name, step)
    had, old = slot in obj.__dict__, obj.__dict__.get(slot)
    obj.__dict__[slot] = wrapper
    _settle(obj)

    def undo() -> None:
        if had:
            obj.__dict__[slot] = old
        else:
            obj.__dict__.pop(slot, None)
        _settle(obj)

    return undo
