"""The course as notebooks: ``anatomy learn start EXERCISE --notebook`` writes ``NN_exercise.ipynb``.

    write_exercise("attention", folder=".")      # 01_attention.ipynb: the post's lines, the shapes, what must
                                                 # hold, a cell to fill in, a cell that grades it
    grade("attention", attention)                # in the notebook: anatomy.course.grade, progress saved

The notebook is plain nbformat 4 JSON written here (no Jupyter needed to make it). Its last cell calls
:func:`grade`, which grades with ``anatomy.course.grade(exercise_id, obj)`` (one object, or a dict of them for an
exercise with several entries) and records the attempt in the same progress file as ``anatomy learn check``
(``.anatomy-learn.json`` in the notebook's folder), so ``anatomy learn list`` shows it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from anatomy.course import IMPORTS, get

NBFORMAT = {"nbformat": 4, "nbformat_minor": 5}
KERNEL = {
    "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
    "language_info": {"name": "python"},
}


def _cell(kind: str, text: str, n: int) -> dict[str, Any]:
    cell: dict[str, Any] = {"cell_type": kind, "id": f"anatomy-{n}", "metadata": {}, "source": text.splitlines(True)}
    if kind == "code":
        cell.update(execution_count=None, outputs=[])
    return cell


def notebook(cells: list[tuple[str, str]], lang: str = "en") -> dict[str, Any]:
    """An nbformat-4 notebook (a dict) from ``(kind, text)`` cells, outputs empty."""
    return {
        **NBFORMAT,
        "metadata": {**KERNEL, "language_info": {"name": "python"}},
        "cells": [_cell(kind, text, i) for i, (kind, text) in enumerate(cells)],
    }


def notebook_name(exercise_id: str) -> str:
    return Path(get(exercise_id).file).with_suffix(".ipynb").name


def grade_call(exercise_id: str) -> str:
    """The grading cell's code."""
    e = get(exercise_id)
    obj = e.entries[0] if len(e.entries) == 1 else "{" + ", ".join(f'"{n}": {n}' for n in e.entries) + "}"
    return f'from anatomy.notebook import grade\n\ngrade("{e.id}", {obj}, notebook="{notebook_name(e.id)}")'


def exercise_cells(exercise_id: str, lang: str = "en", hint: bool = False) -> list[tuple[str, str]]:
    e = get(exercise_id)
    zh = lang == "zh"
    title = e.title[1] if zh else e.title[0]
    intro = [
        f"# {e.id} ({e.section}) · {title}",
        "",
        ("原文" if zh else "The post") + f" {e.section}:",
        "",
        f"> 「{e.post[0]}」",
    ]
    if not zh:
        intro += [">", f"> ({e.post[1]})"]
    intro += [
        "",
        "**形状（图例字母）**" if zh else "**Shapes** (the legend's letters)",
        "",
        "```text",
        e.shapes,
        "```",
        "",
        "**必须满足**" if zh else "**What must hold**",
        "",
    ]
    intro += [f"- {m[1] if zh else m[0]}" for m in e.must]
    if hint:
        intro += ["", ("**提示**：" if zh else "**Hint**: ") + (e.hint[1] if zh else e.hint[0])]
    body = "\n".join(line for line in e.signature.splitlines() if not line.startswith(("import ", "from ")))
    fill = IMPORTS + "\n\n" + body.strip("\n") + "\n"
    how = (
        "写完上面的单元格并运行它，然后运行下面这个单元格评分（进度记在本文件夹的 .anatomy-learn.json，"
        "`anatomy learn list` 会显示）。"
        if zh
        else "Fill in the cell above and run it, then run the cell below to grade it (progress is kept in this "
        "folder's .anatomy-learn.json, which `anatomy learn list` shows)."
    )
    return [("markdown", "\n".join(intro)), ("code", fill), ("markdown", how), ("code", grade_call(e.id))]


def write_exercise(exercise_id: str, folder: str | Path = ".", lang: str = "en", hint: bool = False) -> Path:
    """Write the exercise's notebook into ``folder`` (never over an existing file) and record it as started."""
    from anatomy.course.progress import Progress

    e = get(exercise_id)
    folder = Path(folder)
    path = folder / notebook_name(e.id)
    if path.exists():
        raise FileExistsError(f"{path} already exists: it is never overwritten; open it, or move it away to start over")
    progress = Progress(folder)
    folder.mkdir(parents=True, exist_ok=True)
    text = json.dumps(notebook(exercise_cells(e.id, lang, hint), lang), ensure_ascii=False, indent=1) + "\n"
    with open(path, "x", encoding="utf-8") as f:  # "x": fails rather than replace a file made meanwhile
        f.write(text)
    progress.started(e.id, path)
    progress.notebook(e.id, path)
    return path


class Graded:
    """A course result (``anatomy.course.grade``'s) that displays as HTML in Jupyter and prints as the CLI does;
    every attribute of the course's result is reachable through it (``ok``, ``verdict``, ``pitfalls``...)."""

    def __init__(self, result: Any, lang: str = "en"):
        self.result, self.lang = result, lang

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or "result" not in self.__dict__:
            raise AttributeError(name)
        return getattr(self.__dict__["result"], name)

    def __str__(self) -> str:
        r = self.result
        return r.render(self.lang) if hasattr(r, "render") else str(r)

    def __repr__(self) -> str:
        return str(self)

    def _repr_html_(self) -> str:
        from anatomy.notebook.display import course_html

        return course_html(self.result, self.lang)


class NotGraded:
    """What :func:`grade` shows when the code cannot be graded (``LearnError``): the command line's two lines."""

    ok, verdict, pitfall = False, "error", "error"
    pitfalls: list[str] = []
    lines: list[dict[str, Any]] = []

    def __init__(self, exercise_id: str, error: Any):
        self.exercise, self.error = exercise_id, error

    def render(self, lang: str = "en") -> str:
        head = "还没通过 · " if lang == "zh" else "NOT YET · "
        return f"{head}{self.exercise}\n  {self.error.text(lang)}"

    def __str__(self) -> str:
        return self.render()


def _pitfall(result: Any) -> str | None:
    pitfalls = getattr(result, "pitfalls", None)
    if isinstance(result, NotGraded):
        return "error"
    if pitfalls:
        return str(list(pitfalls)[0])
    return getattr(result, "pitfall", None)


def grade(
    exercise_id: str, obj: Any, *, notebook: str | Path | None = None, folder: str | Path = ".", lang: str | None = None
) -> Graded:
    """Grade ``obj`` (a function or class, or a dict of them) as ``exercise_id`` with ``anatomy.course.grade`` and
    record the attempt in ``folder``'s progress file (``notebook``: the notebook it was made in)."""
    import anatomy.course as course
    from anatomy.course import language
    from anatomy.course.progress import Progress

    e = get(exercise_id)
    grader = getattr(course, "grade", None)
    if grader is None:
        raise RuntimeError(
            "anatomy.course.grade(exercise_id, obj) is not in this version of anatomy.course; grade "
            f"a file instead: anatomy learn check {e.id} FILE.py"
        )
    from anatomy.course.grader import LearnError

    try:
        result = grader(e.id, obj)
    except LearnError as err:  # code that cannot be graded: one line, an attempt all the same (as the CLI does)
        result = NotGraded(e.id, err)
    folder = Path(folder)
    path = folder / (notebook or notebook_name(e.id))
    ok = bool(getattr(result, "ok", getattr(result, "passed", False)))
    progress = Progress(folder)
    progress.checked(e.id, path, ok, _pitfall(result))
    progress.notebook(e.id, path)
    return Graded(result, language(lang))
