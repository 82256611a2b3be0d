"""``anatomy learn``: the post's sections as exercises the learner writes, graded by the recorder and the doctor.

    anatomy learn list                     # the exercises, with progress kept in the working folder
    anatomy learn start attention          # writes 01_attention.py: the post's lines, the signature, the shapes
    anatomy learn check attention          # pass (with your shape table), or the pitfall, its line, a hint
    anatomy learn solution attention       # the reference, after a real attempt (or --force)

From Python: :func:`skeleton`, :func:`anatomy.course.check.check`, :class:`anatomy.course.progress.Progress`.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from anatomy.course.exercises import BY_ID, EXERCISES, Exercise, get
from anatomy.course.grader import MARKER

if TYPE_CHECKING:
    from anatomy.course.grader import Result
    from anatomy.course.progress import Progress

__all__ = ["BY_ID", "EXERCISES", "Exercise", "get", "grade", "language", "skeleton", "solution_text"]

TINY_LM_ZH = (
    "# 这个练习训练 08_block.py 里的 TransformerBlock：不用写新代码。\n"
    "# 运行：anatomy learn check tiny_lm 08_block.py\n"
)
STATUS_ZH = {"not started": "未开始", "tried": "尝试过", "done": "已完成"}
IMPORTS = "import math\n\nimport torch\nfrom torch import nn\n"


def language(choice: str | None = None) -> str:
    """``zh`` or ``en``: the flag, else the locale (``LC_ALL``, ``LANG``...), else English."""
    if choice:
        if choice not in ("zh", "en"):
            raise ValueError(f"--lang must be zh or en, got {choice!r}")
        return choice
    for var in ("LC_ALL", "LC_MESSAGES", "LANG", "LANGUAGE"):
        if os.environ.get(var, "").lower().startswith("zh"):
            return "zh"
    return "en"


def grade(
    exercise_id: str, obj: object, *, timeout: float | None = 20.0, lang: str | None = None, **options: Any
) -> Result:
    """Grade ``obj`` (a function or class, or a module instance, defined anywhere: a notebook cell, a test) as
    exercise ``exercise_id``; for the two-name exercises (heads, masks, add_norm) a dict, module or tuple.

    Returns a :class:`anatomy.course.grader.Result`: ``ok``, ``verdict``, ``pitfalls``, ``lines`` (the learner's
    lines pointed at), ``report`` (the full text), ``str(result)`` (what ``anatomy learn check`` prints) and
    ``to_dict()``. Code that cannot be graded raises :class:`anatomy.course.grader.LearnError` (one line). The
    same time limit guards every call of the learner's code as for a file."""
    from anatomy.course.check import grade_subject
    from anatomy.course.grader import subject_of

    exercise = get(exercise_id)
    subject = subject_of(get("block") if exercise.id == "tiny_lm" else exercise, obj)
    result = grade_subject(exercise, subject, timeout=timeout, **options)
    result.lang = language(lang)
    return result


def skeleton(exercise: Exercise, lang: str = "en", hint: bool = False) -> str:
    """The file ``anatomy learn start`` writes: a header naming the exercise, the post's lines, shapes, what must
    hold, (the hint), the imports and the signatures to fill in."""
    zh = lang == "zh"
    title = exercise.title[1] if zh else exercise.title[0]
    lines = [
        f"{MARKER} {exercise.id} ({exercise.section}) · {title}",
        ("# 写完下面的代码后运行：" if zh else "# Fill in the code below, then run: ")
        + f"anatomy learn check {exercise.id} {get('block').file if exercise.id == 'tiny_lm' else exercise.file}",
        "#",
        ("# 原文" if zh else "# The post ") + f"{exercise.section}:",
    ]
    lines += [f"#   「{exercise.post[0]}」"] + ([] if zh else [f"#   ({exercise.post[1]})"])
    lines += ["#", "# 形状（图例字母）：" if zh else "# Shapes (the legend's letters):"]
    lines += [f"#   {s}" for s in exercise.shape_text(lang).splitlines()]
    lines += ["#", "# 必须满足：" if zh else "# What must hold:"]
    lines += [f"#   - {m[1] if zh else m[0]}" for m in exercise.must]
    if hint:
        lines += ["#", ("# 提示：" if zh else "# Hint: ") + (exercise.hint[1] if zh else exercise.hint[0])]
    else:
        lines += [
            "#",
            "# 需要提示：anatomy learn start --hint（或看 check 的输出）"
            if zh
            else "# A hint: anatomy learn start --hint (or read what check says)",
        ]
    from anatomy.course.skeleton_texts import SIGNATURE_ZH

    signature = TINY_LM_ZH if zh and exercise.id == "tiny_lm" else exercise.signature
    signature = SIGNATURE_ZH.get(exercise.id, signature) if zh else signature
    body = "\n".join(line for line in signature.splitlines() if not line.startswith(("import ", "from ")))
    return "\n".join(lines) + "\n\n" + IMPORTS + "\n\n" + body.strip("\n") + "\n"


def solution_text(exercise: Exercise) -> str:
    from importlib import resources

    name = "block" if exercise.id == "tiny_lm" else exercise.id
    return resources.files("anatomy.course.solutions").joinpath(f"{name}.py").read_text(encoding="utf-8")


def solution_path(exercise: Exercise) -> str:
    from importlib import resources

    name = "block" if exercise.id == "tiny_lm" else exercise.id
    return str(resources.files("anatomy.course.solutions").joinpath(f"{name}.py"))


def page(progress: Progress | None = None, lang: str = "zh") -> str:
    """The exercises as one self-contained HTML page (the post's lines, shapes, what must hold, your status)."""
    from anatomy.inspection.page import render_page

    zh = lang == "zh"
    rows = []
    for e in EXERCISES:
        status = "not started" if progress is None else progress.status(e.id)
        status = STATUS_ZH.get(status, status) if zh else status
        rows.append(
            [
                e.section,
                e.id,
                e.title[1] if zh else e.title[0],
                e.post[0] if zh else e.post[1],
                e.shape_text(lang).replace("\n", " · "),
                "；".join(m[1] for m in e.must) if zh else "; ".join(m[0] for m in e.must),
                status,
            ]
        )
    header = (
        ["节", "练习", "标题", "原文", "形状", "必须满足", "进度"]
        if zh
        else ["section", "exercise", "title", "the post", "shapes", "what must hold", "status"]
    )
    return render_page(
        title="anatomy learn · 亲手写一遍 Transformer Block" if zh else "anatomy learn · write the block",
        subtitle="把你的Block亲手写一遍并观察每一步的shape",
        notes=["anatomy learn start ID · anatomy learn check ID · anatomy learn solution ID"],
        tables=[("练习 · exercises", header, rows)],
    )
