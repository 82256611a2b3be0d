"""Norms without parameters called as functions (``F.layer_norm(x, (D,))`` in the block's own forward, OLMo-1's
non-parametric LayerNorm written inline): no sub-module to find, nothing to share. The recording shows them as
``layer_norm`` steps that use no learner parameter; two of them (one per sub-layer) make the block's norms, and the
reference's norms then carry gain 1 and bias 0 (an identity affine). Two calls of one parameter-free function are
two identical norms, never a shared LayerNorm: there are no gamma and beta to share.
"""

from __future__ import annotations

import torch
from torch import nn

from anatomy.doctor.mapping.naming import Hypothesis, Source
from anatomy.doctor.mapping.norms import BlockParts, block_hypotheses
from anatomy.tracing import steps as r

NORM_OPS = ("layer_norm",)
REF_NORMS = ("attn_add_norm.norm", "ffn_add_norm.norm")


def functional_norm_lines(rec: r.Recording | None) -> list[int]:
    """The lines of the recorded parameter-free ``F.layer_norm`` calls on the data, in call order."""
    if rec is None:
        return []
    return [s.line for s in rec.steps if s.op in NORM_OPS and s.data and not s.params]


def functional_norm_hypotheses(
    attn: list[Hypothesis], parts: BlockParts, module: nn.Module, rec: r.Recording | None, d: int
) -> list[Hypothesis]:
    """Block hypotheses whose two norms are the recorded parameter-free calls (gain 1, bias 0); [] unless the
    block has no norm module, an FFN, and exactly two such calls."""
    lines = functional_norm_lines(rec)
    if parts.norms or not parts.ffn or len(lines) != 2:
        return []
    where = f"line {lines[0]}, called twice" if lines[0] == lines[1] else f"lines {lines[0]}, {lines[1]}"
    note = f"F.layer_norm without parameters ({where}): gain 1, bias 0"
    ones = {
        f"{ref}.weight": Source(f"(F.layer_norm, line {line})", "gain 1", lambda params: torch.ones(d))
        for ref, line in zip(REF_NORMS, lines)
    }
    return [
        Hypothesis(f"{hp.style}, {note}", {**hp.sources, **ones}, hp.modules, hp.heads, hp.qk_norm)
        for hp in block_hypotheses(attn, parts, module)
    ]
