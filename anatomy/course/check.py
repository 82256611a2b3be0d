"""Grade one exercise: :func:`check` dispatches to the function, module, doctor or training grader."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from anatomy.course import exercises as ex
from anatomy.course import function_grader
from anatomy.course import functions as fx
from anatomy.course.grader import LearnError, Result, Subject, load

if TYPE_CHECKING:
    from anatomy.doctor.loading.limits import Step


def check(exercise_id: str, path: str | os.PathLike[str], *, timeout: float | None = 20.0, **options: Any) -> Result:
    """Grade the file ``path`` as exercise ``exercise_id``; :class:`LearnError` when it cannot be graded."""
    exercise = ex.get(exercise_id)
    subject = load(ex.get("block") if exercise.id == "tiny_lm" else exercise, str(path), timeout)
    return grade_subject(exercise, subject, timeout=timeout, **options)


def check_isolated(
    exercise_id: str, path: str | os.PathLike[str], *, timeout: float | None = 20.0, **options: Any
) -> Result:
    """:func:`check` in a process of its own where the system has ``fork`` (``doctor/loading/child.py``, as
    ``anatomy check`` runs): the learner's ``os._exit``, ``atexit`` handlers, threads, signal handlers and
    ``os.chdir`` end or change only that process; a call still running well past ``timeout`` (an ignored
    ``SIGALRM``, C code) is ended by the doctor's watchdog. What the learner prints still shows (a learner debugs
    with ``print``). Raises :class:`LearnError` as :func:`check` does, and when the learner's code ended the
    process itself."""
    from anatomy.doctor.loading.child import FORK, forked
    from anatomy.doctor.loading.limits import grace
    from anatomy.doctor.loading.subject import CheckTimeout

    def overdue(step: Step) -> tuple[str, str, str]:
        en, zh = step.describe()
        err = CheckTimeout(en, zh, step.limit)
        late = grace(step.limit)
        return (
            "error",
            f"{err.en} (still running {late:g} s after the limit: its process was ended)",
            f"{err.zh}（超过时限 {late:g} 秒后仍在运行：其进程已被终止）",
        )

    def compute() -> tuple[Any, ...]:  # ("result", Result) or ("error", en, zh)
        try:
            return ("result", check(exercise_id, path, timeout=timeout, **options))
        except LearnError as err:
            return ("error", err.en, err.zh)

    if not FORK:  # no process of its own: the in-process limits only
        kind, *value = compute()
    else:
        outcome = forked(compute, overdue=overdue, quiet=False)
        if outcome.crash is not None:
            raise LearnError(f"the check itself failed: {outcome.crash}", f"检查本身出错：{outcome.crash}") from None
        if not outcome.answered:
            name = os.path.basename(str(path))
            raise LearnError(
                f"{name}: your code ended the process itself (os._exit({outcome.code}) or a signal) before the check "
                "finished, so nothing was checked; remove the exit (a debugging leftover?)",
                f"{name}：检查结束前，你的代码自己结束了进程（os._exit({outcome.code}) 或一个信号），因此什么也没能"
                "检查；请删掉这个退出（调试时留下的？）",
            )
        kind, *value = outcome.answer
    if kind == "error":
        raise LearnError(*value)
    result: Result = value[0]
    return result


def grade_subject(exercise: ex.Exercise, subject: Subject, *, timeout: float | None = 20.0, **options: Any) -> Result:
    """Grade the learner's names (from a file or from Python) as ``exercise``."""
    if exercise.id in fx.FUNCTION_EXERCISES:
        return function_grader.grade(exercise, subject, timeout)
    if exercise.id in ("layernorm", "add_norm"):
        from anatomy.course import modules

        return modules.grade(exercise, subject, timeout)
    if exercise.id in ("mha", "block"):
        from anatomy.course import doctor_exercises

        return doctor_exercises.grade(exercise, subject, timeout)
    if exercise.id == "gpt":
        from anatomy.course import gpt

        return gpt.grade(exercise, subject, timeout, **options)
    from anatomy.course import tiny_lm

    return tiny_lm.grade(exercise, subject, timeout, **options)


__all__ = ["LearnError", "Result", "check", "check_isolated"]
