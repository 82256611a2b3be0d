"""Reading a file the user named, bounded: only a regular file (links followed) is read, a FIFO is never waited on
and a device never read without end, and no more than ``limit`` bytes are read. Used for corpora
(``data.corpora``) and for the stored units of a claims run (``experiments.store``), each phrasing the refusal in
its own words from the exceptions here. :func:`read_json` reads a JSON file the user gave (a checkpoint's
``config.json``, ``generation_config.json``, a tokenizer's files) the same way, and refuses in one line naming the
path a file too big, not UTF-8, not JSON, nested deeper than any configuration (``"[" * 100000`` once ended in a
``RecursionError``), holding NaN, or of the wrong top-level type."""

from __future__ import annotations

import json
import os
import stat
import warnings
from pathlib import Path
from typing import Any

__all__ = ["BadJSON", "FileTooBig", "NotRegularFile", "file_kind", "read_json", "read_regular"]


def file_kind(mode: int) -> str:
    """What a file that is not a regular one is, in words, from its ``st_mode``."""
    for test, what in (
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return what
    return "not a regular file"


class NotRegularFile(OSError):
    """The path is a folder, a FIFO, a device or a socket: ``kind`` says which (:func:`file_kind`)."""

    def __init__(self, kind: str) -> None:
        super().__init__(f"{kind}, not a regular file")
        self.kind = kind


class FileTooBig(OSError):
    """The file holds more than ``limit`` bytes: ``size`` as the file system said before reading, or ``None`` when it
    grew past ``limit`` while being read."""

    def __init__(self, size: int | None, limit: int) -> None:
        super().__init__(
            f"more than the {limit} bytes expected at most"
            if size is None
            else f"{size} bytes, more than the {limit} expected at most"
        )
        self.size, self.limit = size, limit


def read_regular(path: Path, limit: int) -> bytes:
    """The bytes of the regular file ``path``, at most ``limit`` of them; :class:`NotRegularFile`,
    :class:`FileTooBig`, or the ``OSError`` of opening or reading it otherwise."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise NotRegularFile(file_kind(info.st_mode))
        if info.st_size > limit:
            raise FileTooBig(info.st_size, limit)
        with os.fdopen(os.dup(fd), "rb") as f:
            data = f.read(limit + 1)
        if len(data) > limit:  # it grew while being read
            raise FileTooBig(None, limit)
        return data
    finally:
        os.close(fd)


# ------------------------------------------------------------------------------------------------ JSON files

DEPTH = 200  # nesting deeper than this is no configuration (Python's parser itself gives up near 1000)
JSON_LIMIT = 64 * 2**20  # bytes: config.json, generation_config.json, an index, a run's own files
_NAMES: dict[type, str] = {dict: "a JSON object", list: "a JSON array", str: "a JSON string"}


class BadJSON(ValueError):
    """A JSON file the user named cannot be used: one line, ``"{path}: {what is wrong}; expected {what}"``."""


class _Constant:
    """NaN, Infinity or -Infinity where the file wrote one (not JSON; found by the walk to name its field)."""

    def __init__(self, text: str) -> None:
        self.text = text


def _where(keys: list[str | int]) -> str:
    """``field 'rope_scaling.factor'`` / ``field 'layers[2]'`` / ``the top level``."""
    name = "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in keys).lstrip(".")
    return f"field {name!r}" if name else "the top level"


def _walk(value: object) -> tuple[int, list[str | int] | None, str]:
    """``(deepest nesting, the key path of the first NaN/Infinity or None, its text)``, without recursion."""
    deepest = 0
    stack: list[tuple[object, int, list[str | int]]] = [(value, 0, [])]
    while stack:
        item, depth, keys = stack.pop()
        if isinstance(item, _Constant):
            return deepest, keys, item.text
        if isinstance(item, (dict, list)):
            deepest = max(deepest, depth + 1)
            if deepest > DEPTH:
                return deepest, None, ""
            pairs = item.items() if isinstance(item, dict) else enumerate(item)
            stack.extend((v, depth + 1, [*keys, k]) for k, v in reversed(list(pairs)))
    return deepest, None, ""


def read_json(
    path: Path, *, expect: type | None = dict, what: str | None = None, limit: int = JSON_LIMIT, finite: bool = False
) -> Any:
    """The JSON value of the regular file ``path`` (at most ``limit`` bytes, UTF-8, nested at most ``DEPTH`` deep,
    with ``finite`` no NaN/Infinity (which Python's ``json`` writes and reads, and our trainer state holds: a best
    loss of Infinity), the top level of type ``expect`` when given), or :class:`BadJSON` with one line naming the path,
    what is wrong and ``what`` was expected (default: from ``expect``). A key written twice keeps its last value,
    as Python's ``json`` and Hugging Face read it, with a warning naming it. A missing file is the
    ``FileNotFoundError`` of opening it, left to the caller."""
    expected = what or (_NAMES.get(expect, "JSON") if expect is not None else "JSON")
    try:
        data = read_regular(path, limit)
    except FileNotFoundError:
        raise
    except FileTooBig as err:
        raise BadJSON(f"{path}: {err}; expected {expected}") from None
    except NotRegularFile as err:
        raise BadJSON(f"{path}: {err.kind}, not a regular file; expected {expected}") from None
    except OSError as err:
        raise BadJSON(f"{path}: cannot be read ({err.strerror or err}); expected {expected}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise BadJSON(f"{path}: not UTF-8 text ({err.reason} at byte {err.start}); expected {expected}") from None
    twice: list[str] = []

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        out = dict(items)
        if len(out) < len(items) and not twice:
            names = [k for k, _ in items]
            twice.append(next(k for i, k in enumerate(names) if k in names[:i]))
        return out

    try:
        constant_hook = _Constant if finite else None  # without it, NaN and Infinity read as Python's json reads them
        value = json.loads(text.removeprefix("\ufeff"), object_pairs_hook=pairs, parse_constant=constant_hook)
    except json.JSONDecodeError as err:
        raise BadJSON(
            f"{path}: not valid JSON ({err.msg} at line {err.lineno}, column {err.colno}); expected {expected}"
        ) from None
    except RecursionError:
        raise BadJSON(f"{path}: nested more than {DEPTH} levels deep; expected {expected}") from None
    depth, keys, constant = _walk(value)
    if depth > DEPTH:
        raise BadJSON(f"{path}: nested more than {DEPTH} levels deep; expected {expected}")
    if keys is not None:
        raise BadJSON(f"{path}: {_where(keys)} is {constant}, which JSON does not allow; expected {expected}")
    if expect is not None and not isinstance(value, expect):
        got: dict[type, str] = {
            dict: "an object",
            list: "an array",
            str: "a string",
            bool: "true/false",
            type(None): "null",
        }
        raise BadJSON(f"{path}: expected {expected}, got {got.get(type(value), 'a number')}")
    if twice:
        warnings.warn(
            f"{path}: key {twice[0]!r} is written more than once; its last value is used (as Python's json and "
            "Hugging Face read it)",
            UserWarning,
            stacklevel=2,
        )
    return value
