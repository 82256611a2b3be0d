"""The mapping read from the recorded dataflow, next to the one read from names (``naming.py`` says how)."""

from __future__ import annotations

import torch

from anatomy.doctor.mapping.naming import ATTN_KEYS, Hypothesis
from anatomy.tracing.steps import Recording


def with_observed(
    hyps: list[Hypothesis], observed: Hypothesis | None, params: dict[str, torch.Tensor]
) -> list[Hypothesis]:
    """Name hypotheses and the one read from the recorded dataflow (``observed.hypothesis``), best first: those
    the dataflow confirms (the same q/k/v/o weights), then the observed one when none does, then the rest."""
    if observed is None:
        return hyps
    if not hyps:
        return [observed]
    agree = [hp for hp in hyps if agrees(hp, observed, params)]
    if agree:
        return agree + [hp for hp in hyps if hp not in agree]
    return [observed] + hyps


def agrees(hyp: Hypothesis, observed: Hypothesis, params: dict[str, torch.Tensor]) -> bool:
    """Does ``hyp`` give the q/k/v/o weights the dataflow shows (in our head order)?"""
    for key in (f"{k}.weight" for k in ATTN_KEYS):
        a, b = hyp.sources.get(key), observed.sources.get(key)
        if a is None or b is None:
            return False
        try:
            x, y = a.fn(params).detach(), b.fn(params).detach()
        except (KeyError, IndexError, RuntimeError):
            return False
        if x.numel() != y.numel() or not torch.allclose(x.reshape(y.shape).to(y.dtype), y, rtol=0, atol=0):
            return False
    return True


def from_dataflow(recording: Recording, d: int, h: int) -> Hypothesis | None:
    """The q/k/v/o reading of a recording (``recorder.record``), or None when it does not show them all."""
    from anatomy.doctor.recording.observed import hypothesis

    return hypothesis(recording, d, h)
