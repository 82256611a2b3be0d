"""``anatomy.doctor.loading.isolation``: how the doctor runs a module (sizes checked, one thread, forked RNG)."""

from __future__ import annotations

import pytest
import torch

from anatomy.doctor.loading.isolation import isolated, require_sizes
from anatomy.doctor.loading.limits import Hung, Step
from anatomy.doctor.loading.subject import CheckError, CheckTimeout


@pytest.mark.parametrize(
    "kw, message",
    [
        (dict(d_model=0, n_heads=1), "d_model must be a positive integer, got 0"),
        (dict(d_model=8, n_heads=True), "n_heads must be a positive integer, got True"),
        (dict(d_model=8, n_heads=2, seq=2.5), "seq must be a positive integer, got 2.5"),
        (dict(d_model=10, n_heads=4), "d_model=10 must be divisible by n_heads=4"),
    ],
)
def test_require_sizes_names_the_size_that_is_wrong(kw, message):
    with pytest.raises(CheckError, match=message):
        require_sizes(**kw)


def test_require_sizes_accepts_good_sizes():
    require_sizes(16, 4, batch=2, seq=7)


def test_isolated_runs_on_one_thread_and_a_seeded_fork_then_restores_both():
    torch.manual_seed(123)
    before = torch.get_rng_state()
    threads = torch.get_num_threads()
    with isolated(5):
        assert torch.get_num_threads() == 1
        inside = torch.rand(3)
    assert torch.equal(inside, torch.rand(3, generator=torch.Generator().manual_seed(5)))
    assert torch.get_num_threads() == threads and torch.equal(torch.get_rng_state(), before)


def test_isolated_turns_a_stray_alarm_into_a_check_timeout():
    with pytest.raises(CheckTimeout), isolated(0):
        raise Hung(Step(lambda: ("the forward ran past 1 s", "前向超过 1 秒"), 1.0, 0.0))
