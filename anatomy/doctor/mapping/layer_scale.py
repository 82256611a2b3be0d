"""LayerScale (CaiT, DINOv2, timm's ``Block(init_values=...)``): a learned per-channel gain on each branch before
the residual add, ``x + g ⊙ f(x)``. Our blocks have none; a gain on a branch's output equals that branch with its
last projection scaled row by row (``g ⊙ (W h + b) = (g[:, None] W) h + g ⊙ b``), so the reference carries it
folded into the attention's ``o_proj`` and the FFN's ``down_proj``: a named design, not a difference.

The gains are the block's ``D``-wide 1-d parameters no other reading takes (not a norm's, not a Linear's bias),
outside the attention module; with two, the first defined belongs to the attention branch, the second to the FFN.
"""

from __future__ import annotations

import torch
from torch import nn

from anatomy.doctor.mapping.naming import Hypothesis, Reader, Source

BRANCH_OUTPUTS = {
    "attn": ("attn.o_proj.weight", "attn.o_proj.bias"),
    "ffn": ("ffn.down_proj.weight", "ffn.down_proj.bias"),
}


def gains(module: nn.Module, d: int, taken: set[str], attn_scope: str | None) -> list[str]:
    """The learner's candidate LayerScale gains, in definition order."""

    def inside_attn(name: str) -> bool:
        return bool(attn_scope) and name.startswith(f"{attn_scope}.")

    return [
        n
        for n, p in module.named_parameters()
        if p.dim() == 1 and p.numel() == d and n not in taken and not inside_attn(n) and not n.endswith("bias")
    ]


def _scaled(src: Source, gain: str, ref: str) -> Source:
    """``src`` multiplied by ``gain`` along the output channels."""
    rows = ref.endswith("weight")

    def fn(params: dict[str, torch.Tensor], f: Reader = src.fn, g: str = gain, rows: bool = rows) -> torch.Tensor:
        value, scale = f(params), params[g]
        scaled: torch.Tensor = value * (scale[:, None] if rows else scale)
        return scaled

    return Source(src.user, (src.note + ", " if src.note else "") + f"× {gain} (LayerScale)", fn)


def with_layer_scale(hyps: list[Hypothesis], module: nn.Module, d: int, attn_scope: str | None) -> list[Hypothesis]:
    """``hyps`` with the learner's LayerScale gains folded into each branch's last projection, ahead of them; the
    hypotheses unchanged when the block has no such gains."""
    if not hyps:
        return hyps
    taken = {s.user for s in hyps[0].sources.values()}
    found = gains(module, d, taken, attn_scope)
    if len(found) == 2:
        plans = [dict(zip(("attn", "ffn"), found))]
    elif len(found) == 1:
        plans = [{"attn": found[0]}, {"ffn": found[0]}]
    else:
        return hyps
    out = []
    for plan in plans:
        what = ", ".join(f"{g} on the {'attention' if b == 'attn' else 'feed-forward'} branch" for b, g in plan.items())
        for hp in hyps:
            src = dict(hp.sources)
            for branch, gain in plan.items():
                for ref in BRANCH_OUTPUTS[branch]:
                    if ref in hp.sources:  # a branch without a bias keeps none
                        src[ref] = _scaled(hp.sources[ref], gain, ref)
            out.append(
                Hypothesis(
                    f"{hp.style}, LayerScale ({what}) folded into the branch's last projection",
                    src,
                    hp.modules,
                    hp.heads,
                    hp.qk_norm,
                )
            )
    return out + hyps
