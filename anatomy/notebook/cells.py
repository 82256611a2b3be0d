"""Which notebook cell a line of code lives in: ``cell [n], line k`` instead of ``/tmp/ipykernel_812/3761.py:21``.

    cell_of("/tmp/ipykernel_812/376128.py")      # 3: the execution count of the cell that defined that code
    where("/tmp/ipykernel_812/376128.py", 21)    # "cell [3], line 21"
    name_cells(report)                           # the doctor's pointers then say "cell [3], line 21 `...`"

IPython compiles each cell under a file name of its own: ipykernel's ``/tmp/ipykernel_PID/HASH.py`` (kept in
``shell.compile._filename_map`` with the cell's execution count, the ``In [n]`` the notebook shows), the terminal's
``<ipython-input-N-HASH>``. Both keep the cell's source in :mod:`linecache`, so the line itself is found as for a
file. IPython is never imported here: when it is not loaded already, no line is in a cell.
"""

from __future__ import annotations

import linecache
import os
import re
import sys
from typing import Any

_TERMINAL = re.compile(r"^<ipython-input-(\d+)-[0-9a-f]+>$")
_KERNEL = re.compile(r"(^|[\\/])ipykernel_\d+[\\/][^\\/]+\.py$")


def _filename_map() -> dict[str, int]:
    ipython = sys.modules.get("IPython")
    if ipython is None:
        return {}
    try:
        shell = ipython.get_ipython()
    except Exception:  # noqa: BLE001 - a half-initialised IPython: no cells
        return {}
    found = getattr(getattr(shell, "compile", None), "_filename_map", None)
    return found if isinstance(found, dict) else {}


def cell_of(file: str) -> int | None:
    """The execution count of the notebook (or IPython) cell compiled as ``file``, or ``None`` for a real file."""
    if not file:
        return None
    m = _TERMINAL.match(file)
    if m:
        return int(m.group(1))
    number = _filename_map().get(file)
    if isinstance(number, int):
        return number
    return None


def is_cell(file: str) -> bool:
    """``file`` names a cell (known to this IPython, or shaped like one even where its number is unknown)."""
    return bool(file) and (cell_of(file) is not None or bool(_KERNEL.search(file)) or file.startswith("<ipython-"))


def label(file: str) -> str:
    """``cell [3]`` for a cell (``cell [?]`` when its number is unknown), the file's base name otherwise."""
    if not is_cell(file):
        return os.path.basename(file)
    n = cell_of(file)
    return f"cell [{n if n is not None else '?'}]"


def where(file: str, line: int) -> str:
    """``cell [3], line 21`` for a cell, ``my_attention.py:21`` for a file."""
    return f"{label(file)}, line {line}" if is_cell(file) else f"{os.path.basename(file)}:{line}"


def where_zh(file: str, line: int) -> str:
    return (
        f"单元格 [{cell_of(file) if cell_of(file) is not None else '?'}] 第 {line} 行"
        if is_cell(file)
        else f"{os.path.basename(file)}:{line}"
    )


def source(file: str, line: int) -> str:
    """The stripped source of ``line`` in ``file`` (a cell's source comes from IPython's linecache entries)."""
    return linecache.getline(file, line).strip()


def _relabel(text: str, line: int, file: str, zh: bool) -> str:
    """``line 21 `x`...`` → ``cell [3], line 21 `x`...`` (the first mention only); the file's base name likewise."""
    if not isinstance(text, str):
        return text
    base = os.path.basename(file)
    text = text.replace(f"{base}:{line}", where(file, line))
    if zh:
        head = f"第 {line} 行"
        return text.replace(head, where_zh(file, line), 1) if text.startswith(head) else text
    head = f"line {line}"
    return text.replace(head, where(file, line), 1) if text.startswith(head) else text


def name_in_text(text: str) -> str:
    """A message that names a cell's file (``at line 5 of 3761.py``, ``3761.py:5``) names the cell instead."""
    if not isinstance(text, str):
        return text
    for file, number in _filename_map().items():
        base = os.path.basename(file)
        if base not in text:
            continue
        text = re.sub(rf"\bline (\d+) of {re.escape(base)}", rf"cell [{number}], line \1", text)
        text = re.sub(rf"第 (\d+) 行（{re.escape(base)}）", rf"单元格 [{number}] 第 \1 行", text)
        text = re.sub(rf"{re.escape(base)}:(\d+)", rf"cell [{number}], line \1", text)
    return text


def name_pointer(w: dict[str, Any]) -> dict[str, Any]:
    """One pointer of the doctor (``{"line", "file", "where", "source", "en", "zh"}``), its cell named in place."""
    file, line = w.get("file") or "", w.get("line")
    if not isinstance(line, int) or not is_cell(file):
        return w
    w["cell"] = cell_of(file)
    w["where"], w["where_zh"] = where(file, line), where_zh(file, line)
    w["en"] = _relabel(w.get("en", ""), line, file, zh=False)
    w["zh"] = _relabel(w.get("zh", ""), line, file, zh=True)
    return w


def name_cells(report: Any) -> Any:
    """Every pointer of a doctor's ``Report`` names its cell (changed in place, returned for chaining)."""
    for finding in getattr(report, "findings", []):
        for w in getattr(finding, "where", []) or []:
            if isinstance(w, dict):
                name_pointer(w)
    return report


def trace_cells(trace: Any) -> list[int | None]:
    """The cell of each row of a learner trace (``None``: a file), from its recording; also the deviations named."""
    steps = getattr(getattr(trace, "recording", None), "steps", None) or []
    out: list[int | None] = []
    for row in getattr(trace, "rows", []):
        step = steps[row.step] if 0 <= row.step < len(steps) else None
        out.append(cell_of(step.file) if step is not None else None)
    for dev in getattr(trace, "deviations", []) or []:
        if isinstance(dev, dict) and is_cell(dev.get("file") or ""):
            dev["cell"] = cell_of(dev["file"])
            dev["where"] = where(dev["file"], dev.get("line", 0))
    return out
