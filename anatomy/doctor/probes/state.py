"""The state the probes share (:class:`ProbeState`), built once by ``check.py`` and read by every probe
(``behaviour.py``, ``block.py``, ``scaling.py``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from anatomy.doctor.contract.masks import MaskFormat
from anatomy.doctor.contract.precision import tol
from anatomy.doctor.loading.subject import CheckedModule
from anatomy.doctor.mapping.naming import Hypothesis
from anatomy.doctor.mapping.norms import BlockParts
from anatomy.doctor.report.findings import Finding

LEAK_TOL = 1e-9  # relative: hidden tokens must have *no* effect (a -1e9 or -inf fill gives exactly 0 in float64)
Skip = tuple[str, str]  # a probe's reason for skipping (en, zh)
ProbeResult = tuple[list[Finding], Skip | None]  # what a probe found, or why it was skipped
Probe = Callable[["ProbeState"], ProbeResult]

if TYPE_CHECKING:
    from anatomy.doctor.contract.masks import MaskCandidate
    from anatomy.doctor.mapping.norm_fit import NormInfo
    from anatomy.doctor.recording.dataflow import Observation


@dataclass
class ProbeState:
    """What every probe reads: the learner's module and how to call it, the probe input and its plain output, the
    conventions found (mask, causality, positions, norms), the mapping, and earlier probes' verdicts."""

    subject: CheckedModule
    kind: str
    d: int
    h: int
    x: torch.Tensor
    base: torch.Tensor
    base_w: torch.Tensor | None
    mask: MaskFormat | None = None
    causal: bool = False
    causal_mask: MaskFormat | None = None
    dep: torch.Tensor | None = None
    window: int | None = None  # a causal module's sliding window, seen in ``dep`` (contract/conventions.py)
    parts: BlockParts | None = None
    hyp: Hypothesis | None = None
    raw_scores: Callable[[], torch.Tensor | None] | None = None  # q k^T of the mapped reference, plain input
    found_block: dict[str, Any] = field(default_factory=dict)
    silenced: str | None = None  # residual probe's verdict: "identity" | "constant" | "normed"
    positions: str | None = None  # what :func:`positions` found: "none" | "relative" | "absolute" | "dependent"
    positional: str | None = None  # the positional scheme the diagnosis matched inside attention ("RoPE, ...")
    norms: dict[str, NormInfo] = field(default_factory=dict)  # path → the norm found by behaviour (norm_fit.py)
    mask_ignored: bool = False  # no mask convention changes the output
    mask_leaks: list[dict[str, Any]] | None = None  # every mask convention that acts leaks: [{sense, layout, leak}]
    form_leaks: list[MaskCandidate] = field(default_factory=list)  # accepted mask forms that leak beside a right one
    call_order: list[str] = field(default_factory=list)  # sub-module paths as one plain forward finishes them
    attn_scope: str | None = None  # the learner's attention module (blocks)
    observation: Observation | None = None  # the recorded forward (scale, mapping, lines)

    @property
    def b(self) -> int:
        return self.x.shape[0]

    @property
    def t(self) -> int:
        return self.x.shape[1]

    @property
    def dh(self) -> int:
        return self.d // self.h

    @property
    def scale(self) -> float:
        return max(1.0, float(self.base.abs().nan_to_num(0).max()))


def leak(v: float, state: ProbeState) -> bool:
    """Does a change of ``v`` count (relative to the output's scale, at the precision the module computes in)?"""
    return v > tol(LEAK_TOL) * state.scale
