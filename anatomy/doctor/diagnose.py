"""Differential diagnosis: the learner's output next to our reference, and next to the reference under each fault.

The learner's weights are copied into our ``MultiHeadAttention`` / ``EncoderBlock`` (``mapping.py``), both run in
float64 on the same fixed inputs (no mask; a padding mask; a causal mask or ``is_causal``), and the distance
``max |user - reference|`` is measured on real query rows. The correct reference matching means the learner's
module computes what the post describes. Otherwise every fault of the bug zoo (``anatomy.pitfalls``) is switched
on in turn; the one that reproduces the learner's output to tolerance is named. When no single fault does, every
pair of faults that the zoo can switch on together on one reference is tried, with the same tolerance (two faults
can be on together when they shadow different attributes of the reference: :func:`compatible_pairs`), and a pair
that reproduces the output is named. When nothing does, the doctor says where the first difference appears
(inputs and outputs of each mapped sub-module, then the attention weights, then the output) instead of guessing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import nn

from anatomy import pitfalls
from anatomy.components.attention import MultiHeadAttention
from anatomy.components.block import EncoderBlock
from anatomy.components.kernels import repeat_kv
from anatomy.components.positional import ALiBiPositional, RotaryPositional
from anatomy.doctor.mapping import BlockParts, Hypothesis, kv_heads, load_reference
from anatomy.doctor.norm_fit import StdNorm
from anatomy.doctor.subject import CallError, Subject, max_diff

TOL = 1e-6  # relative to max(1, max |output|); faithful float64 code agrees to ~1e-13, faults differ by > 1e-3
ATTENTION_FAULTS = ("no_scaling", "scale_by_d_model", "split_without_transpose", "merge_wrong_transpose",
                    "mask_after_softmax", "padding_mask_on_queries", "causal_off_by_one")
BLOCK_FAULTS = ("shared_layernorm", "no_residual", "norm_on_residual_path")
MASK_FAULTS = ("mask_after_softmax", "padding_mask_on_queries")


@dataclass
class Scenario:
    name: str
    x: torch.Tensor
    ref_mask: torch.Tensor | None  # bool, True = may attend, broadcastable to (B, H, T, S)
    ref_causal: bool
    user_mask: torch.Tensor | None
    rows: torch.Tensor  # (B, T) bool: the query rows compared (real tokens)
    user_out: torch.Tensor | None = None
    user_weights: torch.Tensor | None = None


@dataclass
class Candidate:
    hyp: int
    variant: tuple
    faults: tuple[str, ...]  # () for the correct reference, one fault, or a pair
    distance: float

    @property
    def fault(self) -> str | None:
        return self.faults[0] if self.faults else None


@dataclass
class Diagnosis:
    status: str  # "matches" | "fault" | "ambiguous" | "unexplained" | "unavailable"
    reason: str = ""
    fault: str | None = None  # the reproducing fault (with a pair: its first)
    faults: list[str] = field(default_factory=list)  # every fault of the reproducing combination: one, or a pair
    also: list[str] = field(default_factory=list)  # other single faults that reproduce it too
    also_pairs: list[list[str]] = field(default_factory=list)  # other pairs that reproduce it too
    hypothesis: Hypothesis | None = None
    variant: dict = field(default_factory=dict)
    distance_correct: float | None = None
    distance_fault: float | None = None
    scale: float = 1.0
    nearest: list[dict] = field(default_factory=list)
    first_difference: dict | None = None
    key: tuple | None = None  # (hypothesis index, variant) of the reference that explains the output best

    def to_dict(self) -> dict:
        return {
            "status": self.status, "reason": self.reason or None, "fault": self.fault, "also": self.also,
            "mapping": None if self.hypothesis is None else self.hypothesis.style,
            "variant": self.variant, "max_abs_diff_vs_reference": _num(self.distance_correct),
            "max_abs_diff_vs_faulty_reference": _num(self.distance_fault), "output_scale": _num(self.scale),
            "nearest": self.nearest, "first_difference": self.first_difference,
            "faults": self.faults, "also_pairs": self.also_pairs,
        }


def _num(v):
    if v is None:
        return None
    return None if math.isinf(v) or math.isnan(v) else float(v)


# Relative schemes inside attention the reference can carry, as the report names them: RoPE with positions
# 0..T-1 in both pairings at the bases in use (10000: the paper, GPT-NeoX, Llama 1-2; 500000: Llama 3; 1000000:
# Qwen), then ALiBi with the paper's slopes.
ROPE_BASES = (10000, 500000, 1000000)
POSITIONAL_VARIANTS = {
    **{f"rope-{layout}@{base}": f"RoPE, {layout} layout ({pairs})" + ("" if base == 10000 else f", base {base:,}")
       for base in ROPE_BASES
       for layout, pairs in (("half", "pairs i, i + Dh/2"), ("interleaved", "pairs 2i, 2i+1"))},
    "alibi": "ALiBi",
}


class References:
    """Builds (and caches) the reference for a hypothesis and a variant, and runs it."""

    def __init__(self, kind: str, d: int, h: int, parts: BlockParts | None, params: dict[str, torch.Tensor],
                 positional: bool = False):
        """``positional``: the outputs depend on token positions (:func:`probes.positions`), so the references
        with a relative scheme inside attention are tried too, after the plain one."""
        self.kind, self.d, self.h, self.parts, self.params = kind, d, h, parts, params
        self.positional = positional
        self._cache: dict = {}

    def variants(self, placement_hint: str | None = None) -> list[tuple]:
        schemes = [None, *POSITIONAL_VARIANTS] if self.positional else [None]
        if self.kind == "attention":
            return [() if s is None else (s,) for s in schemes]
        placements = ["pre", "post"] if placement_hint in ("pre", "norm_on_residual_path") else ["post", "pre"]
        return [(p, a) + (() if s is None else (s,)) for s in schemes for p in placements
                for a in self.parts.activations]

    def _positional(self, variant: tuple):
        scheme = variant[-1] if variant and variant[-1] in POSITIONAL_VARIANTS else None
        if scheme is None:
            return None
        if scheme == "alibi":
            return ALiBiPositional(n_heads=self.h)
        layout, base = scheme.removeprefix("rope-").split("@")
        return RotaryPositional(head_dim=self.d // self.h, layout=layout, base=float(base))

    def build(self, hyp_index: int, hyp: Hypothesis, variant: tuple) -> nn.Module:
        key = (hyp_index, variant)
        if key not in self._cache:
            kv = kv_heads(hyp, self.params, self.d, self.h)  # fewer than H: grouped-query attention
            qk = hyp.qk_norm.kind if hyp.qk_norm is not None else None
            positional = self._positional(variant)
            if self.kind == "attention":
                ref = MultiHeadAttention(d_model=self.d, n_heads=self.h, n_kv_heads=kv, kernel="math", qk_norm=qk,
                                         positional=positional)
            else:
                placement, activation = variant[:2]
                ref = EncoderBlock.build(d_model=self.d, n_heads=self.h, n_kv_heads=kv, d_ff=self.parts.d_ff,
                                         activation=activation, norm=self.parts.norm, norm_eps=self.parts.eps,
                                         placement=placement, kernel="math", qk_norm=qk, positional=positional)
                if self.parts.form == "unbiased_std":  # the annotated transformer's norm, carried as it is
                    for an in (ref.attn_add_norm, ref.ffn_add_norm):
                        an.norm = StdNorm(self.d, self.parts.eps)
            if hyp.qk_norm is not None:  # the learner's eps (a block's builder gives the QK-norm the block's)
                attn = self.attention(ref)
                attn.q_norm.eps = attn.k_norm.eps = hyp.qk_norm.eps
            ref = ref.double().eval()
            load_reference(ref, hyp, self.params)
            self._cache[key] = ref
        return self._cache[key]

    @staticmethod
    def attention(ref: nn.Module) -> MultiHeadAttention:
        return ref if isinstance(ref, MultiHeadAttention) else ref.attn

    @staticmethod
    def run(ref: nn.Module, sc: Scenario) -> torch.Tensor:
        with torch.no_grad():
            return ref(sc.x, mask=sc.ref_mask, is_causal=sc.ref_causal)[0]

    def describe(self, variant: tuple) -> dict:
        out = {} if self.kind == "attention" else {"placement": variant[0], "activation": variant[1],
                                                   **self.parts.describe()}
        scheme = variant[-1] if variant and variant[-1] in POSITIONAL_VARIANTS else None
        if scheme is not None:
            out["positional"] = POSITIONAL_VARIANTS[scheme]
        return out


def faults_for(kind: str, scenarios: list[Scenario]) -> list[str]:
    names = list(ATTENTION_FAULTS)
    if kind == "block":
        names += BLOCK_FAULTS
    if not any(sc.ref_causal for sc in scenarios):
        names.remove("causal_off_by_one")
    if not any(sc.name == "padding" for sc in scenarios):
        names = [n for n in names if n not in MASK_FAULTS]
    return names


def consistent(fault: str, scenarios: list[Scenario]) -> bool:
    """Evidence outside the compared rows that a fault needs. A padding mask applied to query rows changes the
    padded rows' outputs (whatever the fill); a module that ignores its mask leaves them as they were without one,
    and on real rows the two look the same."""
    if fault != "padding_mask_on_queries":
        return True
    plain = next((sc for sc in scenarios if sc.name == "plain"), None)
    padding = next((sc for sc in scenarios if sc.name == "padding"), None)
    if plain is None or padding is None:
        return False
    padded = ~padding.rows
    return bool(padded.any()) and max_diff(padding.user_out.nan_to_num(1e30), plain.user_out, padded) > 0


def _shadowed(ref: nn.Module, name: str) -> frozenset | None:
    """The attributes and sub-modules (``(module path, name)``) fault ``name`` shadows on ``ref``; None when it
    changes nothing there, or changes values in place (then it is never paired)."""
    modules = list(ref.named_modules(remove_duplicate=False))

    def state() -> dict:
        return {(p, k): id(v) for p, m in modules for k, v in (*vars(m).items(), *m._modules.items())}

    before = state()
    try:
        with pitfalls.inject(ref, name):
            after = state()
    except ValueError:  # nothing to change in this reference
        return None
    changed = frozenset(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    return changed or None


def compatible_pairs(ref: nn.Module, names: list[str]) -> list[tuple[str, str]]:
    """Pairs of faults the zoo can switch on together on ``ref``: each shadows attributes of the reference's
    instances (``pitfalls.apply``) and undoes exactly that, so two that shadow different attributes compose, in
    either order. Two that shadow the same one (both scales; two knobs of the attention kernel, which each replace
    ``_attend``; two rewirings of the residual) would silently keep only the second, and are not paired."""
    shadowed = {n: _shadowed(ref, n) for n in names}
    usable = [n for n in names if shadowed[n] is not None]
    return [(a, b) for i, a in enumerate(usable) for b in usable[i + 1:] if not shadowed[a] & shadowed[b]]


def user_outputs(subject: Subject, scenarios: list[Scenario]) -> list[Scenario]:
    done = []
    for sc in scenarios:
        try:
            sc.user_out, sc.user_weights = subject.run(sc.x, sc.user_mask)
        except CallError:
            continue
        done.append(sc)
    return done


def diagnose(subject: Subject, refs: References, hyps: list[Hypothesis], scenarios: list[Scenario],
             placement_hint: str | None = None) -> Diagnosis:
    scenarios = user_outputs(subject, scenarios)
    if not hyps:
        return Diagnosis("unavailable", "no mapping of your parameters onto q_proj/k_proj/v_proj/o_proj was found")
    if not scenarios:
        return Diagnosis("unavailable", "the module could not be run on the diagnosis inputs")
    scale = max(max(1.0, float(sc.user_out[sc.rows].abs().nan_to_num(0).max())) for sc in scenarios)
    tol = TOL * scale

    def distance(ref: nn.Module) -> float:
        worst = 0.0
        for sc in scenarios:
            worst = max(worst, max_diff(sc.user_out, refs.run(ref, sc), sc.rows))
            if worst > tol * 1e6:
                break
        return worst

    variants = refs.variants(placement_hint)
    cands: list[Candidate] = []
    for i, hyp in enumerate(hyps):
        for v in variants:
            cands.append(Candidate(i, v, (), distance(refs.build(i, hyp, v))))
            if cands[-1].distance <= tol:
                c = cands[-1]
                return Diagnosis("matches", hypothesis=hyp, variant=refs.describe(v), distance_correct=c.distance,
                                 scale=scale, key=(i, v))
    fault_names = [f for f in faults_for(refs.kind, scenarios) if consistent(f, scenarios)]
    for i, hyp in enumerate(hyps):
        for v in variants:
            ref = refs.build(i, hyp, v)
            for name in fault_names:
                try:
                    with pitfalls.inject(ref, name):
                        cands.append(Candidate(i, v, (name,), distance(ref)))
                except ValueError:  # the fault has nothing to change in this variant
                    continue
    if not any(c.faults and c.distance <= tol for c in cands):  # no single fault: two at once?
        for i, hyp in enumerate(hyps):
            for v in variants:
                ref = refs.build(i, hyp, v)
                for a, b in compatible_pairs(ref, fault_names):
                    with pitfalls.inject(ref, a), pitfalls.inject(ref, b):
                        cands.append(Candidate(i, v, (a, b), distance(ref)))
    correct = sorted((c for c in cands if not c.faults), key=lambda c: c.distance)
    best_correct = correct[0]
    hits = sorted((c for c in cands if c.faults and c.distance <= tol), key=lambda c: c.distance)
    ranked = sorted(cands, key=lambda c: c.distance)
    nearest = [{"fault": c.fault, "mapping": hyps[c.hyp].style, **refs.describe(c.variant),
                "max_abs_diff": _num(c.distance), "faults": list(c.faults)} for c in ranked[:3]]
    if hits:
        combos = list(dict.fromkeys(c.faults for c in hits))
        best = hits[0]
        same = [c for c in correct if c.hyp == best.hyp and c.variant == best.variant]
        return Diagnosis("fault" if len(combos) == 1 else "ambiguous", fault=best.fault, faults=list(best.faults),
                         also=[c[0] for c in combos[1:] if len(c) == 1],
                         also_pairs=[list(c) for c in combos[1:] if len(c) == 2],
                         hypothesis=hyps[best.hyp], variant=refs.describe(best.variant),
                         distance_correct=(same or correct)[0].distance, distance_fault=best.distance, scale=scale,
                         nearest=nearest, key=(best.hyp, best.variant))
    ref = refs.build(best_correct.hyp, hyps[best_correct.hyp], best_correct.variant)
    first = first_difference(subject, ref, hyps[best_correct.hyp], scenarios, tol)
    return Diagnosis("unexplained", hypothesis=hyps[best_correct.hyp], variant=refs.describe(best_correct.variant),
                     distance_correct=best_correct.distance, scale=scale, nearest=nearest, first_difference=first,
                     key=(best_correct.hyp, best_correct.variant))


# --- where the first difference appears ---------------------------------------------------------------------------

def _record(module: nn.Module, log: list, name: str):
    def hook(_mod, args, out):
        first = args[0] if args and isinstance(args[0], torch.Tensor) else None
        log.append((name, first, out if isinstance(out, torch.Tensor) else None))
    return module.register_forward_hook(hook)


def first_difference(subject: Subject, ref: nn.Module, hyp: Hypothesis, scenarios: list[Scenario],
                     tol: float) -> dict:
    """Walk the reference's mapped sub-modules in call order; the first input or output that differs is named."""
    sc = next((s for s in scenarios if max_diff(s.user_out, References.run(ref, s), s.rows) > tol), scenarios[0])
    user_named, ref_named = dict(subject.module.named_modules()), dict(ref.named_modules())
    user_log, ref_log, handles = [], [], []
    try:
        for r, u in hyp.modules.items():
            if r in ref_named and u in user_named:
                handles.append(_record(ref_named[r], ref_log, r))
        for u in set(hyp.modules.values()):
            if u in user_named:
                handles.append(_record(user_named[u], user_log, u))
        attn = References.attention(ref)
        handles.append(_record(attn.hook_weights, ref_log, "weights"))
        ref_out = References.run(ref, sc)
        try:
            user_out, user_w = subject.run(sc.x, sc.user_mask)
        except CallError:
            user_out, user_w = sc.user_out, sc.user_weights
    finally:
        for hd in handles:
            hd.remove()
    rows = sc.rows
    matched: list[str] = []
    used: dict[str, int] = {}
    user_calls: dict[str, list] = {}
    for name, i, o in user_log:
        user_calls.setdefault(name, []).append((i, o))
    for name, ref_in, ref_o in ref_log:
        if name == "weights":
            if user_w is None or ref_o is None or user_w.shape != ref_o.shape:
                continue
            d = max_diff(user_w, hyp.learner_heads(ref_o))
            if d > tol:
                return {"scenario": sc.name, "where": "attention weights", "where_zh": "注意力权重", "user": None,
                        "reference": "hook_weights", "max_abs_diff": d, "matching_before": matched}
            matched.append("attention weights")
            continue
        u = hyp.modules[name]
        k = used.get(u, 0)
        used[u] = k + 1
        calls = user_calls.get(u, [])
        if k >= len(calls):
            return {"scenario": sc.name, "where": f"{u} is not called where {name} is",
                    "where_zh": f"{u} 没有在 {name} 的位置被调用", "user": u, "reference": name, "max_abs_diff": None,
                    "matching_before": matched}
        u_in, u_out = calls[k]
        if name.endswith("q_proj") and ref_o is not None:  # regrouped query heads: compare in the learner's order
            ref_o = hyp.learner_features(ref_o)
        if name.endswith("o_proj") and ref_in is not None:
            ref_in = hyp.learner_features(ref_in)
        if name.endswith(("q_norm", "k_norm")):  # ours (B, H, T, Dh); yours often (B, T, H, Dh) or (B, T, D)
            ref_in, ref_o = (_learner_layout(hyp, name, r, u) for r, u in ((ref_in, u_in), (ref_o, u_out)))
        for what, a, b in (("input", u_in, ref_in), ("output", u_out, ref_o)):
            if a is None or b is None or a.shape != b.shape:
                continue
            d = max_diff(a, b, rows if a.dim() == 3 and a.shape[:2] == rows.shape else None)
            if d > tol:
                return {"scenario": sc.name, "where": f"{what} of {u}",
                        "where_zh": f"{u} 的{'输入' if what == 'input' else '输出'}", "user": u, "reference": name,
                        "max_abs_diff": d, "matching_before": matched}
        matched.append(u)
    return {"scenario": sc.name, "where": "after the last mapped sub-module (the output)",
            "where_zh": "最后一个对应的子模块之后（输出）", "user": None, "reference": None,
            "max_abs_diff": max_diff(user_out, ref_out, rows), "matching_before": matched}


def _learner_layout(hyp: Hypothesis, name: str, ref: torch.Tensor | None, user: torch.Tensor | None):
    """A reference q/k ``(B, H, T, Dh)`` in the learner's layout: as is when the shapes agree, else read token-major
    (``(B, T, H, Dh)``, or ``(B, T, H·Dh)`` for a norm over all heads) when the sizes do."""
    if ref is None or user is None or ref.dim() != 4:
        return ref
    if name.endswith("q_norm"):  # regrouped query heads: in the learner's order
        ref = hyp.learner_heads(ref)
    if ref.shape == user.shape or ref.numel() != user.numel():
        return ref
    return ref.transpose(1, 2).reshape(user.shape)


def raw_scores(ref: nn.Module, sc: Scenario) -> torch.Tensor:
    """``q k^T`` per head ``(B, H, T, S)``, unscaled, as the reference computes q and k for ``sc``."""
    attn, seen = References.attention(ref), {}
    hs = [attn.hook_q.register_forward_hook(lambda m, a, o: seen.__setitem__("q", o)),
          attn.hook_k.register_forward_hook(lambda m, a, o: seen.__setitem__("k", o))]
    try:
        References.run(ref, sc)
    finally:
        for hd in hs:
            hd.remove()
    k = repeat_kv(seen["k"], seen["q"].shape[1])  # (B, H, S, Dh): each key/value head serves its group
    return seen["q"] @ k.transpose(-2, -1)  # (B, H, T, S)
