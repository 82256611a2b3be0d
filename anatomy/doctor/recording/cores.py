"""The attention cores of a recording (``anatomy.tracing``): one per softmax (a per-head loop has H of them), each with
the matmul that produced its scores, the steps between (scale, mask), the weighted sum, and the feature ids that
say which projection rows feed q, k and v. ``observed.py`` reads the scale and the roles from them.

    cores = attention_cores(rec)
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from anatomy.tracing import steps as r

PASS_OPS = {
    "div",
    "div_",
    "__truediv__",
    "true_divide",
    "divide",
    "mul",
    "mul_",
    "__mul__",
    "__rmul__",
    "multiply",
    "masked_fill",
    "masked_fill_",
    "add",
    "add_",
    "__add__",
    "__radd__",
    "sub",
    "__sub__",
    "where",
    "dropout",
    "to",
    "float",
    "double",
    "type_as",
    "clamp",
    "nan_to_num",
    "contiguous",
    "__itruediv__",
    "__imul__",
    "__iadd__",
    "tanh",
}
SCORE_OPS = {"matmul", "__matmul__", "bmm", "einsum", "baddbmm"}


@dataclass
class Core:
    """One attention: softmax(scores) with the steps around it."""

    softmax: r.Step
    scores: r.Step | None  # the matmul that produced the softmax input (None: fused sdpa)
    weighted: r.Step | None  # weights @ v
    chain: list[r.Step] = field(default_factory=list)  # steps between scores and softmax (scale, mask)
    q_feat: torch.Tensor | None = None  # (H', Dh) feature ids of the rows of the scores
    k_feat: torch.Tensor | None = None
    v_feat: torch.Tensor | None = None


def _data_input(
    rec: r.Recording, step: r.Step, prefer_shape: tuple[int, ...] | None = None
) -> tuple[int, r.Step | None]:
    for i, t in enumerate(step.inputs):
        if t.source.startswith("step ") and (prefer_shape is None or t.shape == prefer_shape):
            return i, rec.steps[int(t.source.split()[1])]
    return -1, None


def _consumers(rec: r.Recording, step: r.Step) -> list[r.Step]:
    tag = f"step {step.index}"
    return [s for s in rec.steps[step.index + 1 :] if any(t.source == tag for t in s.inputs)]


def _heads(feat: torch.Tensor | None, dh_axis: int) -> torch.Tensor | None:
    """``(H', Dh)`` feature ids from an operand's companion: Dh is the contracted axis, H' every other axis along
    which the features change (heads); axes where they do not (batch, positions) are read at index 0."""
    if feat is None or feat.dim() == 0:
        return None
    dh_axis %= feat.dim()
    vary = [
        a
        for a in range(feat.dim())
        if a != dh_axis and feat.shape[a] > 1 and not bool((feat.narrow(a, 0, 1) == feat).all())
    ]
    index = [slice(None) if a in vary or a == dh_axis else 0 for a in range(feat.dim())]
    f = feat[tuple(index)]
    kept = [a for a in range(feat.dim()) if a in vary or a == dh_axis]
    f = f.movedim(kept.index(dh_axis), -1)
    rows = f.reshape(-1, f.shape[-1])
    seen, keep = set(), []
    for i, row in enumerate(rows.tolist()):  # (B*H, T, Dh) for bmm: each head once, in the order they come
        if tuple(row) not in seen:
            seen.add(tuple(row))
            keep.append(i)
    return rows[keep]


def _manual_softmaxes(rec: r.Recording) -> dict[int, r.Step]:
    """``e = exp(s); e / e.sum(-1, keepdim=True)``: the division step → the exp step."""
    found = {}
    for s in rec.find("div", "__truediv__", "true_divide", "divide"):
        a, b = rec.producer(s, 0), rec.producer(s, 1)
        if a is not None and a.op == "exp" and b is not None and b.op == "sum" and rec.producer(b) is a:
            found[s.index] = a
    return found


def _is_max_shift(rec: r.Recording, s: r.Step) -> bool:
    """``s - s.max(-1, keepdim=True)`` (a stable softmax): not part of the scale."""
    if s.op not in ("sub", "__sub__", "sub_") or len(s.inputs) < 2:
        return False
    b = rec.producer(s, 1)
    while b is not None and b.op in ("detach", "__getitem__", "values"):
        b = rec.producer(b)
    return b is not None and b.op in ("max", "amax") and rec.producer(b) is rec.producer(s, 0)


def attention_cores(rec: r.Recording) -> list[Core]:
    cores = []
    manual = _manual_softmaxes(rec)
    for soft in sorted(rec.find(*r.SOFTMAX_OPS, *r.SDPA_OPS) + [rec.steps[i] for i in manual], key=lambda st: st.index):
        if soft.op in r.SDPA_OPS:
            f = soft.feats + [None] * 3
            cores.append(Core(soft, None, soft, [], _heads(f[0], -1), _heads(f[1], -1), _heads(f[2], -1)))
            continue
        chain, s = [], rec.producer(manual[soft.index] if soft.index in manual else soft)
        while s is not None and (s.op in PASS_OPS or _is_max_shift(rec, s)):
            if not _is_max_shift(rec, s):
                chain.append(s)
            _, s = _data_input(rec, s, s.outputs[0].shape)
        scores = s if s is not None and s.op in SCORE_OPS else None
        core = Core(soft, scores, None, chain[::-1])
        if scores is not None:
            fa, fb = ([None, None] + scores.feats)[-2:] if scores.op != "einsum" else (scores.feats + [None, None])[:2]
            eq = scores.extra.get("equation", "")
            if scores.op == "einsum" and "->" in eq:
                core.q_feat, core.k_feat = _einsum_heads(eq, fa, 0), _einsum_heads(eq, fb, 1)
            else:
                core.q_feat, core.k_feat = _heads(fa, -1), _heads(fb, -2)
        nxt = soft
        for _ in range(4):  # dropout / masked_fill between the softmax and the weighted sum
            users = _consumers(rec, nxt)
            mm = next((u for u in users if u.op in SCORE_OPS), None)
            if mm is not None:
                core.weighted = mm
                fv = next((f for f in reversed(mm.feats) if f is not None), None)
                eq = mm.extra.get("equation", "")
                einsum = mm.op == "einsum" and "->" in eq
                core.v_feat = _einsum_heads(eq, fv, 1, value=True) if einsum else _heads(fv, -1)
                break
            passed = next((u for u in users if u.op in PASS_OPS), None)
            if passed is None:
                break
            nxt = passed
        if scores is None and core.weighted is None and _routes(rec, soft, s):
            continue  # a mixture of experts' router: a softmax over experts, not over keys
        cores.append(core)
    return cores


def _routes(rec: r.Recording, soft: r.Step, before: r.Step | None) -> bool:
    """The softmax picks experts: ``topk`` right after it (Mixtral's router) or right before it (GPT-OSS's)."""
    return (before is not None and before.op == "topk") or any(u.op == "topk" for u in _consumers(rec, soft))


def _einsum_heads(eq: str, feat: torch.Tensor | None, which: int, value: bool = False) -> torch.Tensor | None:
    """Feature ids of einsum operand ``which``: Dh is the letter q and k contract, or (``value``) the letter of v
    that survives into the output."""
    if feat is None:
        return None
    ins, res = eq.replace(" ", "").split("->")
    specs = ins.split(",")
    if which >= len(specs) or len(specs[which]) != feat.dim():
        return None
    spec = specs[which]
    other = specs[1 - which] if len(specs) == 2 else ""
    if value:
        dh = [i for i, ch in enumerate(spec) if ch in res and ch not in other]  # v: Dh survives
    else:
        dh = [i for i, ch in enumerate(spec) if ch in other and ch not in res]  # contracted: q·k over Dh
    return _heads(feat, dh[-1]) if dh else None


def key_axis(rec: r.Recording, softmax: r.Step) -> int | None:
    """The axis of ``softmax``'s scores that holds the keys: the one its weighted sum adds up (an einsum's letter
    of the weights that the values share and the output drops: ``bijh,bjhd->bihd`` gives 2; a matmul's last
    axis), or None when the recording does not say."""
    core = next((c for c in attention_cores(rec) if c.softmax.index == softmax.index), None)
    w = None if core is None else core.weighted
    dims = len(softmax.inputs[0].shape) if softmax.inputs else 0
    if w is None or not dims:
        return None
    if w.op in ("matmul", "__matmul__", "bmm"):
        return dims - 1
    eq = str(w.extra.get("equation", "")).replace(" ", "")
    if w.op != "einsum" or "->" not in eq or eq.count(",") != 1:
        return None
    (a, b), out = eq.split("->")[0].split(","), eq.split("->")[1]
    summed = [ch for ch in a if ch in b and ch not in out]
    return a.index(summed[0]) if len(summed) == 1 and len(a) == dims and "." not in a else None
