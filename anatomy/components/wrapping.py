"""Change what ONE module does, from outside: a method wrapped on that instance only, undoably.

The bug zoo's faults (``anatomy.pitfalls``) and the attention-weight recorder (``anatomy.inspection.weights``) use
this; no component imports it, and a module nobody wrapped runs its class's methods and nothing else. ::

    def unscaled(inner):
        return lambda self, q, k, v, ctx, args: inner(self, q, k, v, ctx, replace(args, scale=1.0))

    undo = wrap_method(attn, "attend", "change", unscaled)
    ...                  # attn, and only attn, attends with scale 1
    undo()               # attn is a plain instance of its class again

A wrapper takes the function in place (``self`` first: the class's method, or the next wrapper's function) and
returns the function to call instead. It is kept in the instance's attribute ``_<name>__<label>`` (the label is the
step unless one is given), and the instance's
class becomes a subclass of its own (made once per class and set of names, named like it) whose method ``name``
calls the original class's inside the instance's wrappers. So ``copy.deepcopy`` copies the change with the
instance, a flat view of the instance runs it, and two changes of different steps shadow different attributes.
Wrappers compose in the order of :data:`STEPS` (then of their labels), innermost first, whatever the order they came
in; a second wrapper of a label takes the place of the first until it is undone.
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


def _slots(obj: object, name: str) -> list[tuple[int, str, Wrapper]]:
    """``(rank of the step, label, wrapper)`` of each wrapper on ``obj``'s method ``name``, innermost first."""
    prefix = f"_{name}__"
    found = [
        (STEPS.index(v[0]), key[len(prefix) :], v[1])
        for key, v in obj.__dict__.items()
        if key.startswith(prefix) and isinstance(v, _Slot)
    ]
    return sorted(found, key=lambda f: (f[0], f[1]))


class _Slot(tuple):  # type: ignore[type-arg]
    """``(step, wrapper)``, as an instance keeps one wrapper of a method."""

    __slots__ = ()


def wrappers(obj: object, name: str) -> dict[str, Wrapper]:
    """The wrappers on ``obj``'s method ``name``, by label (empty when it runs its class's method)."""
    return {label: wrapper for _, label, wrapper in _slots(obj, name)}


def wrapped_steps(obj: object, name: str) -> set[str]:
    """The steps (of :data:`STEPS`) at which ``obj``'s method ``name`` is wrapped (empty when it is not)."""
    return {STEPS[rank] for rank, _, _ in _slots(obj, name)}


def _dispatch(base: type, name: str) -> Fn:
    original: Fn = getattr(base, name)

    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        fn = original
        for _, _, wrapper in _slots(self, name):
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
    keys = (key[1:].partition("__")[0] for key, v in obj.__dict__.items() if isinstance(v, _Slot))
    names = frozenset(name for name in keys if callable(getattr(base, name, None)))
    obj.__class__ = _subclass(base, names) if names else base


def wrap_method(obj: Any, name: str, step: str, wrapper: Wrapper, label: str | None = None) -> Callable[[], None]:
    """Wrap ``obj``'s method ``name`` at ``step`` (one of :data:`STEPS`) under ``label`` (default: the step; a
    second wrapper of a label takes the place of the first); returns the function that puts back what that label
    held before. Wrappers of one step with different labels compose in the order of their labels."""
    if step not in STEPS:
        raise ValueError(f"step must be one of {', '.join(STEPS)}, got {step!r}")
    if not callable(getattr(type(obj), name, None)) or "__" in name:
        raise ValueError(f"{type(obj).__name__} has no method {name!r} to wrap")
    slot = f"_{name}__{label or step}"
    had, old = slot in obj.__dict__, obj.__dict__.get(slot)
    obj.__dict__[slot] = _Slot((step, wrapper))
    _settle(obj)

    def undo() -> None:
        if had:
            obj.__dict__[slot] = old
        else:
            obj.__dict__.pop(slot, None)
        _settle(obj)

    return undo
