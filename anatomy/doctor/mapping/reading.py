"""How the learner's parameters are read as the reference's, for the check (``check.py``): every hypothesis (block
parts, functional norms, LayerScale, ``--map``), those complete enough to build a reference, what the report shows of
the mapping, and the names ``--map`` may fill."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from anatomy.components.attention import MultiHeadAttention
from anatomy.components.block import EncoderBlock
from anatomy.doctor.loading.subject import CallError
from anatomy.doctor.mapping import projections as mp
from anatomy.doctor.mapping.functional_norms import functional_norm_hypotheses
from anatomy.doctor.mapping.head_layouts import kv_heads
from anatomy.doctor.mapping.layer_scale import with_layer_scale
from anatomy.doctor.mapping.naming import ATTN_KEYS, Hypothesis
from anatomy.doctor.mapping.norms import BlockParts, block_hypotheses, block_parts
from anatomy.doctor.probes.state import ProbeState

ATTN_REQUIRED = [f"{k}.weight" for k in ATTN_KEYS]
BLOCK_REQUIRED = [f"attn.{r}" for r in ATTN_REQUIRED] + [
    "attn_add_norm.norm.weight",
    "ffn.up_proj.weight",
    "ffn.down_proj.weight",
]


def required(kind: str) -> list[str]:
    return BLOCK_REQUIRED if kind == "block" else ATTN_REQUIRED


def hypotheses(
    state: ProbeState,
    attn_hyps: list[Hypothesis],
    scope: str | None,
    mapping: dict[str, str] | None,
    found: dict[str, Any],
) -> tuple[list[Hypothesis], list[Hypothesis]]:
    """Every reading of the learner's parameters as ours, and those that fill every required reference weight."""
    module, d, h = state.subject.module, state.d, state.h
    if state.kind == "block":
        state.call_order, state.attn_scope = call_order(state), scope
        state.parts = parts = block_parts(module, d, scope, attention_paths(attn_hyps), state.call_order, state.norms)
        hyps = block_hypotheses(attn_hyps, parts, module) if parts.norms and parts.ffn else []
        if not hyps:  # norms without parameters, called as functions (functional_norms.py)
            hyps = functional_norm_hypotheses(attn_hyps, parts, module, getattr(state.observation, "rec", None), d)
        hyps = with_layer_scale(hyps, module, d, scope)  # LayerScale gains folded in (layer_scale.py)
        if not hyps and attn_hyps:  # attention found, norms or FFN not: say what is missing
            hyps = [Hypothesis(attn_hyps[0].style, attn_hyps[0].prefixed("attn.").sources)]
        found["block"] = state.found_block
        state.found_block.update(
            {
                "norms": parts.norms,
                "d_ff": parts.d_ff,
                "activation": None,
                "norm_variant": parts.describe().get("norm_form"),
                "norm_eps": parts.eps if parts.norms else None,
                "norms_by_behaviour": [n.to_dict() for n in parts.found.values()],
            }
        )
    else:
        hyps = attn_hyps
    if mapping:
        hyps = mp.apply_user_map(
            hyps,
            mapping,
            dict(module.named_parameters()),
            ref_names(state.kind, d, h, state.parts),
            dict(module.named_modules()),
        )
    needed = required(state.kind)
    complete = [hp for hp in hyps if not mp.missing(hp, needed)]
    shown = complete[0] if complete else (hyps[0] if hyps else None)
    params = dict(module.named_parameters())
    found["mapping"] = None if shown is None else mapping_found(shown, mp.missing(shown, needed), params, d, h)
    return hyps, complete


def mapping_found(
    hyp: Hypothesis, missing: list[str], params: Mapping[str, torch.Tensor], d: int, h: int
) -> dict[str, Any]:
    return {
        "style": hyp.style,
        "pairs": [[r, s.user, s.note] for r, s in hyp.sources.items()],
        "missing": missing,
        "n_kv_heads": kv_heads(hyp, dict(params), d, h),
        "qk_norm": None if hyp.qk_norm is None else hyp.qk_norm.to_dict(),
    }


def attention_paths(hyps: list[Hypothesis]) -> set[str]:
    paths = set()
    for hp in hyps:
        paths |= set(hp.modules.values())
        paths |= {s.user.rpartition(".")[0] for s in hp.sources.values()}
    return paths


def call_order(state: ProbeState) -> list[str]:
    """Sub-module paths in the order one plain forward calls them (a shared module appears once per call)."""
    order, handles = [], []
    state.subject.stage = ("the walk through your sub-modules", "子模块调用顺序的记录")
    for p, m in state.subject.module.named_modules():
        if p:
            handles.append(m.register_forward_hook(lambda mod, a, o, p=p: order.append(p)))
    try:
        state.subject.run(state.x)
    except CallError:
        pass
    finally:
        for hd in handles:
            hd.remove()
    return order


def ref_names(kind: str, d: int, h: int, parts: BlockParts | None) -> list[str]:
    """Every name ``--map`` may fill: the reference's parameters, QK-norm (``q_norm``/``k_norm``) included."""
    if kind == "attention":
        return [n for n, _ in MultiHeadAttention(d_model=d, n_heads=h, qk_norm="layernorm").named_parameters()]
    d_ff = parts.d_ff if parts is not None and parts.d_ff else 4 * d
    act = parts.activations[0] if parts is not None else "relu"
    return [
        n
        for n, _ in EncoderBlock.build(
            d_model=d, n_heads=h, d_ff=d_ff, activation=act, qk_norm="layernorm"
        ).named_parameters()
    ]
