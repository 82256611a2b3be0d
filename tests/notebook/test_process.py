"""The forked child: answers come back pickled, a module's os._exit ends only the child, errors are one line."""

from __future__ import annotations

import os

import pytest
from torch import nn

from anatomy.notebook import process


class Exits(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.q = nn.Linear(d_model, d_model)

    def forward(self, x):
        os._exit(0)


@pytest.mark.skipif(not process.FORK, reason="fork isolation is Linux-only; elsewhere the check runs in-process")
def test_child_answers_and_an_exit_ends_only_the_child():
    assert process.isolated(lambda: {"n": 41 + 1}).value == {"n": 42}
    parent = os.getpid()
    assert process.isolated(os.getpid).value != parent
    import anatomy

    r = anatomy.check(Exits)
    assert r.verdict == "error" and r.error is not None and r.error[0] == "exit" and not r.ok
    assert str(r).startswith("anatomy check: error: the module ended the process itself (os._exit(0)")


def test_in_process_fallback_and_a_crash_is_one_line():
    here = process.isolated(lambda: 7, isolate=False)
    assert (here.value, here.isolation) == (7, "none")
    from anatomy.doctor import CheckError

    def fails():
        raise CheckError("d_model must be a positive integer, got 0")

    assert process.isolated(fails, isolate=False).error == (
        "check",
        "d_model must be a positive integer, got 0",
        "d_model must be a positive integer, got 0",
    )
    if process.FORK:
        crash = process.isolated(lambda: 1 / 0)
        assert crash.error is not None and crash.error[0] == "crash" and "ZeroDivisionError" in crash.error[1]
