"""How the doctor runs a learner's module: on tiny tensors, single-threaded, on a forked RNG seeded with ``seed``,
with the sizes checked first. ``check`` and ``trace_learner`` both run this way."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

from anatomy.doctor.loading.limits import Hung
from anatomy.doctor.loading.subject import CheckError, CheckTimeout


def require_sizes(d_model: int, n_heads: int, **more: int) -> None:
    """Every size a positive integer and ``d_model`` divisible by ``n_heads``, else :class:`CheckError` naming it."""
    for name, v in (("d_model", d_model), ("n_heads", n_heads), *more.items()):
        if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
            raise CheckError(f"{name} must be a positive integer, got {v!r}")
    if d_model % n_heads:
        raise CheckError(f"d_model={d_model} must be divisible by n_heads={n_heads}")


@contextmanager
def isolated(seed: int) -> Iterator[None]:
    """One thread (on a busy machine intra-op threads cost milliseconds per op for nothing) and a forked RNG
    seeded with ``seed``; the caller's thread count and RNG state are restored on leaving. A :class:`Hung` alarm
    that lands between the learner's code and the doctor's own becomes :class:`CheckTimeout`."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            yield
    except Hung as hung:
        raise CheckTimeout.from_hung(hung) from None
    finally:
        torch.set_num_threads(threads)
