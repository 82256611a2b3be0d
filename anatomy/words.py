"""``key=value`` words of the command line, typed by the dataclass fields they set.

One parser for every command that takes such words (``anatomy train steps=500 d_model=256``, ``anatomy viz
attention n_layers=2``): each value gets the type its field declares (``int``, ``float``, ``bool``, ``str``, each
optionally ``| None``), and a bad word is refused with one ``ValueError`` naming the key, the value and what was
expected.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

TRUE = ("true", "1", "yes", "on")
FALSE = ("false", "0", "no", "off")
NONE = ("none", "null")


def field_type(f: dataclasses.Field[Any]) -> tuple[type, bool]:
    """``(int | float | bool | str, optional)`` from a field's annotation (a string under postponed evaluation)."""
    text = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
    base = text.split("|")[0].strip()
    kinds = {"int": int, "float": float, "bool": bool, "str": str}
    if base not in kinds:
        raise TypeError(f"field {f.name!r} has type {text!r}; key=value words set int, float, bool or str fields")
    return kinds[base], "None" in text


def convert(key: str, raw: str, f: dataclasses.Field[Any]) -> Any:
    """``raw`` (a command-line string) → the type of field ``f``; ``ValueError`` naming key, value and type."""
    want, optional = field_type(f)
    lowered = raw.lower()
    if optional and lowered in NONE:
        return None
    if want is bool:
        if lowered in TRUE:
            return True
        if lowered in FALSE:
            return False
        raise ValueError(f"{key} must be a boolean (true/false), got {raw!r}")
    if want is int:
        try:
            return int(raw)
        except ValueError:
            raise ValueError(f"{key} must be an integer, got {raw!r}") from None
    if want is float:
        try:
            return float(raw)
        except ValueError:
            raise ValueError(f"{key} must be a number, got {raw!r}") from None
    return raw


def parse_words(
    words: Iterable[str],
    fields: Mapping[str, dataclasses.Field[Any]],
    *,
    refused: Mapping[str, str] | None = None,
    valid: Iterable[str] | None = None,
) -> dict[str, Any]:
    """``["steps=10", "bias=false"]`` → ``{"steps": 10, "bias": False}``, each value typed by ``fields[key]``.

    Keys may be spelt with ``-`` for ``_``. ``refused`` maps a key that exists but may not be given to the reason
    (e.g. "is set from the data"). ``valid`` (default: ``fields`` less ``refused``) is listed in every error."""
    refused = dict(refused or {})
    names = sorted(valid if valid is not None else set(fields) - set(refused))
    listing = f"; valid keys: {', '.join(names)}"
    out: dict[str, Any] = {}
    for word in words:
        key, sep, raw = word.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key:
            raise ValueError(f"expected key=value, got {word!r}{listing}")
        if key in refused:
            raise ValueError(f"{key} {refused[key]}{listing}")
        if key not in fields:
            raise ValueError(f"unknown key {key!r}{listing}")
        out[key] = convert(key, raw.strip(), fields[key])
    return out
