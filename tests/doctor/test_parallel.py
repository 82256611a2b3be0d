"""``doctor/diagnosis/parallel.py``: half of the runs on the second core, the answers in order, and the child's
half computed here whenever the child fails."""

from __future__ import annotations

import os

import pytest

from anatomy.doctor.diagnosis import parallel


def _square(x: int) -> int:
    return x * x


def test_the_answers_come_back_in_order_whatever_core_computed_them(monkeypatch):
    monkeypatch.setattr(parallel, "cores", lambda: 2)
    items = list(range(101))
    assert parallel.split_map(_square, items) == [x * x for x in items]
    assert parallel.split_map(_square, items[:5]) == [x * x for x in items[:5]]  # small: serial
    assert parallel.split_map(_square, []) == []


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_the_second_half_runs_in_another_process(monkeypatch):
    monkeypatch.setattr(parallel, "cores", lambda: 2)
    pids = parallel.split_map(lambda _x: os.getpid(), list(range(40)))
    assert set(pids[:20]) == {os.getpid()} and len(set(pids[20:])) == 1 and pids[20] != os.getpid()


def test_a_child_that_fails_leaves_its_half_to_this_process(monkeypatch):
    monkeypatch.setattr(parallel, "cores", lambda: 2)
    parent = os.getpid()

    def fails_in_the_child(x: int) -> int:
        if os.getpid() != parent:
            raise RuntimeError("the child's half fails")
        return x + 1

    assert parallel.split_map(fails_in_the_child, list(range(50))) == list(range(1, 51))

    def unpicklable(x: int) -> object:
        return (lambda: x) if os.getpid() != parent else x  # a lambda cannot be pickled back

    assert parallel.split_map(unpicklable, list(range(30))) == list(range(30))


def test_one_core_stays_serial(monkeypatch):
    monkeypatch.setattr(parallel, "cores", lambda: 1)
    pids = parallel.split_map(lambda _x: os.getpid(), list(range(40)))
    assert set(pids) == {os.getpid()}
