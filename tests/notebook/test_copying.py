"""anatomy.check(instance) copies the instance; what cannot be copied (a lock) is named by its attribute path."""

from __future__ import annotations

import threading

import pytest
from torch import nn

import anatomy
from anatomy.notebook import process
from anatomy.notebook.copying import copy_refusal, uncopyable


class Inner(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(16, 16)
        self.cache = {"guard": [1, threading.Lock()]}


class Locked(nn.Module):
    def __init__(self, d_model=16, n_heads=4):
        super().__init__()
        self.q_proj = nn.Linear(d_model, d_model)
        self.inner = Inner()

    def forward(self, x):
        return self.q_proj(x)


def test_the_path_to_the_value_that_does_not_copy():
    assert uncopyable(Locked()) == ("inner.cache['guard'][1]", "_thread.lock")
    plain = Locked()
    del plain.inner.cache
    assert uncopyable(plain) is None
    looped = Locked()
    looped.inner.me = looped  # a cycle: walked once
    looped.inner.cache = {"ok": 1}
    looped.lock = threading.RLock()
    assert uncopyable(looped) == ("lock", "_thread.RLock")
    assert "`a.b` holds a x.Y, which cannot be copied" in copy_refusal("M", "a.b", "x.Y")


@pytest.mark.parametrize("isolate", [False, None] if process.FORK else [False])
def test_check_of_an_instance_holding_a_lock_names_the_attribute_in_one_line(isolate):
    r = anatomy.check(Locked(), isolate=isolate)
    text = str(r)
    assert r.verdict == "error" and "\n" not in text.strip()
    assert "`inner.cache['guard'][1]` holds a _thread.lock" in text and "cannot pickle" not in text
