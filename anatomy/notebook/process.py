"""Run the doctor on an object that exists only in this process's memory, in a process of its own.

    answer = isolated(lambda: check(MyAttention), what="anatomy.check(MyAttention)")
    answer.value          # what the function returned (pickled back through a pipe), or
    answer.error          # (kind, en, zh): "check" (CheckError, CheckTimeout), "exit" (the module ended its process)

A class typed into a notebook cell cannot be imported by a fresh interpreter, so the child is a *fork* of this one
(Linux, and any system where ``os.fork`` exists and ``fork`` is the safe choice): it inherits the class, its cell's
source lines and IPython's cell numbers. Inside the child the doctor's own time limits apply (``timeout`` seconds
per step, ``doctor.loading.limits``), and a watchdog thread ends the child when a step is still running well past
its limit (C code that never returns, a loop that swallows every alarm): the parent then answers with the same
timeout line the command line prints. A module that calls ``os._exit`` ends only the child. Where there is no
``fork`` (Windows) or it is unsafe (macOS), the check runs here, with the doctor's in-process limits only, and the
result says so in ``isolation``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

FORK = hasattr(os, "fork") and sys.platform.startswith("linux")


@dataclass
class Answer:
    value: Any = None
    error: tuple[str, str, str] | None = None  # (kind, en, zh)
    isolation: str = "process"  # "process" (a forked child) or "none" (ran here)


def _error_of(err: BaseException) -> tuple[str, str, str]:
    """(kind, en, zh); a message about a cell's code names the cell, and the cell's line where the code raised."""
    from anatomy.notebook import cells

    kind, en, zh = _error_text(err)
    en, zh = cells.name_in_text(en), cells.name_in_text(zh)
    found = _raised_in_cell(err)
    if found is not None:
        file, line = found
        if cells.where(file, line) not in en:
            src = cells.source(file, line)
            en += f" (at {cells.where(file, line)}: `{src}`)"
            zh += f"（位于{cells.where_zh(file, line)}：`{src}`）"
    return kind, en, zh


def _raised_in_cell(err: BaseException) -> tuple[str, int] | None:
    """The innermost frame in a notebook cell of the innermost exception behind ``err`` (the doctor re-raises the
    learner's exception as one line, ``from None``; the original stays in ``__context__``)."""
    from anatomy.notebook.cells import is_cell

    found: tuple[str, int] | None = None
    seen: set[int] = set()
    e: BaseException | None = err
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        tb = e.__traceback__
        while tb is not None:
            if is_cell(tb.tb_frame.f_code.co_filename):
                found = (tb.tb_frame.f_code.co_filename, tb.tb_lineno)
            tb = tb.tb_next
        e = e.__cause__ or e.__context__
    return found


def _error_text(err: BaseException) -> tuple[str, str, str]:
    from anatomy.doctor import CheckError

    if isinstance(err, CheckError):
        en = getattr(err, "en", None) or str(err)
        zh = getattr(err, "zh", None) or en
        return ("timeout" if type(err).__name__ == "CheckTimeout" else "check", en, zh)
    text = f"{type(err).__name__}: {' '.join(str(err).split())[:300]}"
    return ("crash", f"the check itself failed: {text}", f"检查本身出错：{text}")


def _overdue(step: Any) -> Answer:
    """The watchdog ended a step still running well past its limit: the answer the child sends before it ends."""
    from anatomy.doctor import CheckTimeout
    from anatomy.doctor.loading.limits import grace

    en, zh = step.describe()
    err = CheckTimeout(en, zh, step.limit)
    late = grace(step.limit)
    return Answer(
        error=(
            "timeout",
            f"{err.en} (still running {late:g} s after the limit: its process was ended)",
            f"{err.zh}（超过时限 {late:g} 秒后仍在运行：其进程已被终止）",
        )
    )


def here(fn: Callable[[], Any]) -> Answer:
    """``fn()`` in this process; a :class:`CheckError` becomes the answer's error."""
    from anatomy.doctor import CheckError

    try:
        return Answer(fn(), isolation="none")
    except CheckError as err:
        return Answer(error=_error_of(err), isolation="none")


def isolated(fn: Callable[[], Any], *, isolate: bool | None = None) -> Answer:
    """``fn()`` in a forked child (``isolate`` None: where fork is available and safe; True: required; False:
    here), run by ``doctor/loading/child.py``. The value must pickle; everything the child writes is dropped, at
    the file descriptors too (the kernel's streams are the parent's); processes it starts are ended with it."""
    if isolate is False:
        return here(fn)
    if not FORK:
        if isolate:
            raise ValueError(
                f"isolate=True needs os.fork on Linux; this is {sys.platform} (use isolate=False to run "
                "the check in this process, with in-process time limits only)"
            )
        return here(fn)
    from anatomy.doctor.loading.child import forked

    def compute() -> Answer:
        try:
            return Answer(fn())
        except BaseException as err:  # noqa: BLE001 - the parent must get an answer
            return Answer(error=_error_of(err))

    outcome = forked(compute, overdue=_overdue, quiet=True)
    if outcome.answered and isinstance(outcome.answer, Answer):
        return outcome.answer
    if outcome.crash is not None:  # the answer did not pickle
        return Answer(error=("crash", f"the check itself failed: {outcome.crash}", f"检查本身出错：{outcome.crash}"))
    code = outcome.code
    return Answer(
        error=(
            "exit",
            f"the module ended the process itself (os._exit({code}) or a signal) before the check "
            "finished, so nothing was checked; remove the exit (a debugging leftover?)",
            f"检查结束前，模块自己结束了进程（os._exit({code}) 或一个信号），因此什么也没能检查；请删掉这个退出",
        )
    )
