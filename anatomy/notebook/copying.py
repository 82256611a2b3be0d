"""Which attribute of an instance cannot be copied: ``anatomy.check(inst)`` copies the instance (the caller's is
never changed), and ``copy.deepcopy`` says only "cannot pickle '_thread.lock' object", not where that lock is.

    uncopyable(inst)      # ("cache['guard'][1]", "_thread.lock"), or None when the instance copies

The walk goes through sub-modules, ``__dict__`` attributes, dicts, lists, tuples and sets, depth-first in
definition order, and names the first value that does not copy while everything inside it does (or that has no
inside to walk). A value already seen is not walked again (cycles), and the walk stops after ``LIMIT`` values.
"""

from __future__ import annotations

import copy
from typing import Any

LIMIT = 10_000  # values looked at, at most


def _copies(value: Any) -> bool:
    try:
        copy.deepcopy(value)
    except Exception:  # noqa: BLE001 - any failure to copy is what is looked for
        return False
    return True


def _inside(value: Any) -> list[tuple[str, Any]]:
    """(path step, value) of what ``value`` holds, for the values the walk knows how to open."""
    from torch import nn

    if isinstance(value, nn.Module):
        skip = {"_modules", "_parameters", "_buffers"}
        held: list[tuple[str, Any]] = [(f".{n}", m) for n, m in value._modules.items() if m is not None]
        held += [(f".{n}", p) for n, p in value._parameters.items() if p is not None]
        held += [(f".{n}", b) for n, b in value._buffers.items() if b is not None]
        held += [(f".{n}", v) for n, v in vars(value).items() if n not in skip and not n.startswith("_")]
        held += [(f".{n}", v) for n, v in vars(value).items() if n not in skip and n.startswith("_")]
        return held
    if isinstance(value, dict):
        return [(f"[{k!r}]", v) for k, v in value.items()]
    if isinstance(value, (list, tuple)):
        return [(f"[{i}]", v) for i, v in enumerate(value)]
    if isinstance(value, (set, frozenset)):
        return [(f" (an element {v!r:.40})", v) for v in value]
    state = getattr(value, "__dict__", None)
    if isinstance(state, dict) and not isinstance(value, type):
        return [(f".{n}", v) for n, v in state.items()]
    return []


def uncopyable(obj: Any) -> tuple[str, str] | None:
    """(attribute path from ``obj``, the type of the value there) of the first value that stops a deep copy."""
    seen: set[int] = set()
    failed: set[int] = set()  # values walked that did not copy (an ancestor among them: a cycle)
    budget = [LIMIT]

    def walk(value: Any, path: str) -> tuple[str, str] | None:
        """The culprit inside ``value``; None when it copies, or when what stops it is a value already being
        walked (a cycle back to an ancestor: the culprit is found elsewhere)."""
        if id(value) in seen or budget[0] <= 0:
            return None
        seen.add(id(value))
        budget[0] -= 1
        if _copies(value):
            return None
        failed.add(id(value))
        held = _inside(value)
        for step, inner in held:
            found = walk(inner, path + step)
            if found is not None:
                return found
        if any(id(inner) in failed for _, inner in held):
            return None
        kind = type(value)
        return path, f"{kind.__module__}.{kind.__qualname__}".removeprefix("builtins.")

    found = walk(obj, "")
    if found is None or not found[0]:
        return None
    return found[0].removeprefix("."), found[1]


def copy_refusal(label: str, path: str, kind: str) -> str:
    """The one line ``anatomy.check`` answers with."""
    return (
        f"{label}: the instance cannot be copied for the check (the caller's is never changed): its attribute "
        f"`{path}` holds a {kind}, which cannot be copied; pass the class or a factory instead, or keep that "
        "value out of the module"
    )
