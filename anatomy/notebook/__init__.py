"""Where learners work: the doctor, the trace, the course and the pictures inside Jupyter (docs/notebooks.md).

    import anatomy
    anatomy.check(MyAttention)                      # a class typed into a cell: pass, or the pitfall and its cell line
    anatomy.trace(MyAttention)                      # the post's §5.1 table for it, each row naming its cell
    from anatomy.notebook import grade, show
    grade("attention", attention)                   # a course exercise graded, progress saved (.anatomy-learn.json)
    show.attention("小明把球传给了小红")              # the figures, drawn with the Chinese font

Nothing here imports IPython: the results carry ``_repr_html_`` and friends, which Jupyter calls and a terminal
ignores (it prints the command line's text). ``api.py`` (check, trace), ``process.py`` (the forked child),
``cells.py`` (cell numbers), ``results.py``, ``display.py`` (HTML), ``show.py`` (figures), ``course.py`` (exercise
notebooks), ``tutorials.py`` (docs/tutorial*.md as notebooks).
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["check", "grade", "show", "trace", "write_exercise"]

_LAZY = {
    "check": "anatomy.notebook.api",
    "trace": "anatomy.notebook.api",
    "grade": "anatomy.notebook.course",
    "write_exercise": "anatomy.notebook.course",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        module = importlib.import_module(_LAZY[name])
        value = getattr(module, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'anatomy.notebook' has no attribute {name!r}")
