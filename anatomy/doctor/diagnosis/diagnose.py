"""Differential diagnosis: the learner's output next to our reference, and next to the reference under each fault.

The learner's weights are copied into our ``MultiHeadAttention`` / ``EncoderBlock`` (``mapping/``), both run in
float64 on the same fixed inputs (no mask; a padding mask; a causal mask or ``is_causal``), and the distance
``max |user - reference|`` is measured on real query rows. The correct reference matching means the learner's
module computes what the post describes. Otherwise every fault of the bug zoo (``anatomy.pitfalls``) is switched
on in turn; the one that reproduces the learner's output to tolerance is named. When no single fault does, every
pair of faults that the zoo can switch on together on one reference is tried, likeliest first and at most
:data:`pairs.PAIR_BUDGET` of them, with the same tolerance (two faults can be on together when they shadow different
attributes of the reference: :func:`pairs.compatible_pairs`), and a pair that reproduces the output is named. When
nothing does, the doctor says where the first difference appears (inputs and outputs of each mapped sub-module, then
the attention weights, then the output) instead of guessing, and how many pairs it left untried.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from anatomy.doctor.contract import precision
from anatomy.doctor.contract.masks import max_diff
from anatomy.doctor.diagnosis import pairs
from anatomy.doctor.diagnosis.before_output import diagnose_before_output
from anatomy.doctor.diagnosis.difference import first_difference
from anatomy.doctor.diagnosis.parallel import split_map
from anatomy.doctor.diagnosis.references import References, Scenario, Variant
from anatomy.doctor.diagnosis.sublayer import block_fault_keys, inject, key_of, split
from anatomy.doctor.diagnosis.verdicts import TOL, Candidate, Diagnosis, _num, names_of, where_of
from anatomy.doctor.loading.subject import CallError, CheckedModule
from anatomy.doctor.mapping.naming import Hypothesis
from anatomy.pitfalls import records


def attention_faults() -> list[str]:
    """The bug-zoo faults every diagnosis tries (records with ``diagnosis="attention"``), each with its defaults
    and then with each of its further ``tries`` (keys ``name:param=value``)."""
    return [k for p in records.every(diagnosis="attention") if p.zoo for k in _keys(p)]


def _keys(p: records.Pitfall) -> list[str]:
    return [p.name] + [key_of(p.name, params) for params in p.tries]


def block_faults() -> list[str]:
    """The bug-zoo faults a block's diagnosis tries on the whole block (records with ``diagnosis="block"``)."""
    return [p.name for p in records.every(diagnosis="block") if p.zoo]


def faults_for(kind: str, scenarios: list[Scenario]) -> list[str]:
    """The faults (keys for :func:`sublayer.inject`) a diagnosis of ``kind`` tries on these runs: a fault that
    needs a causal or a padding run is left out without one."""
    names = attention_faults()
    if kind == "block":
        names += block_faults() + block_fault_keys()
    runs = {"causal": any(sc.ref_causal for sc in scenarios), "padding": any(sc.name == "padding" for sc in scenarios)}
    return [n for n in names if _runs_needed(n, runs)]


def _runs_needed(key: str, runs: dict[str, bool]) -> bool:
    p = records.get(split(key)[0])
    return p is None or p.needs is None or runs[p.needs]


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
    return bool(padded.any()) and max_diff(padding.out.nan_to_num(1e30), plain.out, padded) > 0


def user_outputs(subject: CheckedModule, scenarios: list[Scenario]) -> list[Scenario]:
    done = []
    for sc in scenarios:
        try:
            sc.user_out, sc.user_weights = subject.run(sc.x, sc.user_mask)
        except CallError:
            continue
        done.append(sc)
    return done


def diagnose(
    subject: CheckedModule,
    refs: References,
    hyps: list[Hypothesis],
    scenarios: list[Scenario],
    placement_hint: str | None = None,
) -> Diagnosis:
    scenarios = user_outputs(subject, scenarios)
    if not hyps:
        return Diagnosis("unavailable", "no mapping of your parameters onto q_proj/k_proj/v_proj/o_proj was found")
    if not scenarios:
        return Diagnosis("unavailable", "the module could not be run on the diagnosis inputs")
    scale = max(max(1.0, float(sc.out[sc.rows].abs().nan_to_num(0).max())) for sc in scenarios)
    tol = precision.tol(TOL) * scale
    noisy = random_at_eval(subject, scenarios[0], tol)
    if noisy is not None:
        return Diagnosis(
            "fault",
            f"two identical calls in eval mode differ by {noisy:.3g}",
            fault=RANDOM,
            faults=[RANDOM],
            distance_correct=noisy,
            scale=scale,
        )

    def distance(ref: nn.Module) -> tuple[float, dict[str, Any]]:
        per = {sc.name: max_diff(sc.out, refs.run(ref, sc), sc.rows) for sc in scenarios}
        return max(per.values()), per

    def cand(i: int, v: Variant, faults: tuple[str, ...], ref: nn.Module) -> Candidate:
        worst, per = distance(ref)
        return Candidate(i, v, faults, worst, per)

    def until_off(i: int, v: Variant, faults: tuple[str, ...], ref: nn.Module) -> Candidate:
        # a pair's runs, stopped at the first past the tolerance: only a hit or one of the nearest needs them all
        per: dict[str, float] = {}
        for sc in scenarios:
            per[sc.name] = max_diff(sc.out, refs.run(ref, sc), sc.rows)
            if per[sc.name] > tol:
                break
        return Candidate(i, v, faults, max(per.values()), per, complete=len(per) == len(scenarios))

    def completed(c: Candidate) -> None:
        ref = refs.build(c.hyp, hyps[c.hyp], c.variant)
        with inject(ref, c.faults[0]), inject(ref, c.faults[1]):
            c.distance, c.per = distance(ref)
        c.complete = True

    variants = refs.variants(placement_hint)
    cands: list[Candidate] = []
    usual = [v for v in variants if not refs.design_only(v)]
    designs = [v for v in variants if refs.design_only(v)]  # compared once the usual references matched nothing
    for stage in (usual, designs):
        for i, hyp in enumerate(hyps):
            for v in stage:
                cands.append(cand(i, v, (), refs.build(i, hyp, v)))
                if cands[-1].distance <= tol:
                    c = cands[-1]
                    relaid = _relaid(refs, hyp, v, c.distance)
                    if relaid is not None:
                        relaid.key, relaid.scale = (i, v), scale
                        return relaid
                    return Diagnosis(
                        "matches",
                        hypothesis=hyp,
                        variant=refs.describe(v),
                        distance_correct=c.distance,
                        scale=scale,
                        key=(i, v),
                    )
    fault_names = [f for f in faults_for(refs.kind, scenarios) if consistent(split(f)[0], scenarios)]
    cands += _single_faults(refs, hyps, _searched(refs, usual, cands), fault_names, cand)
    search = None
    if not any(c.faults and c.distance <= tol for c in cands):  # no single fault: two at once?
        found, search = pairs.try_pairs(cands, fault_names, lambda i, v: refs.build(i, hyps[i], v), until_off)
        cands += found
    correct = sorted((c for c in cands if not c.faults), key=lambda c: c.distance)
    best_correct = correct[0]
    hits = sorted((c for c in cands if c.faults and c.distance <= tol), key=lambda c: (c.distance, len(c.faults)))
    nearest = _nearest(cands, refs, hyps, completed)
    partial = None if hits else _partial(cands, tol)
    if hits or partial is not None:
        best = hits[0] if hits else partial
        assert best is not None  # one of the two, by the condition above
        combos = list(dict.fromkeys(c.faults for c in hits)) or [best.faults]
        same = [c for c in correct if c.hyp == best.hyp and c.variant == best.variant]
        left = None
        if not hits:
            still = {k: d for k, d in best.per.items() if d > tol}
            left = {
                "scenarios": sorted(still),
                "max_abs_diff": _num(max(still.values())),
                "matched": sorted(k for k in best.per if k not in still),
            }
        # hits and partials carry a fault: best.faults[0] is best.fault
        found_diag = Diagnosis(
            "fault" if len(combos) == 1 else "ambiguous",
            fault=split(best.faults[0])[0],
            faults=names_of(best.faults),
            also=[split(c[0])[0] for c in combos[1:] if len(c) == 1],
            also_pairs=[names_of(c) for c in combos[1:] if len(c) == 2],
            hypothesis=hyps[best.hyp],
            variant=refs.describe(best.variant),
            distance_correct=(same or correct)[0].distance,
            distance_fault=max(d for d in best.per.values() if d <= tol) if left else best.distance,
            scale=scale,
            nearest=nearest,
            key=(best.hyp, best.variant),
            sub_layer=where_of(best.faults),
            unexplained=left,
        )
    else:
        inside = diagnose_before_output(
            subject, refs, hyps, best_correct, scenarios, fault_names, cands, (scale, tol), nearest
        )
        found_diag = inside or _unexplained(subject, refs, hyps, best_correct, scenarios, tol, scale, nearest)
    found_diag.pairs = None if search is None else search.to_dict()
    return found_diag


def _searched(refs: References, usual: list[Variant], plain: list[Candidate]) -> list[Variant]:
    """The variants the fault search runs on: the usual ones, and a published design's (``refs.design_only``)
    only when it came nearer than all of them with no fault (a bug inside a GPT-J block is still named)."""
    near = min(plain, key=lambda c: c.distance, default=None)
    return usual + [near.variant] if near is not None and refs.design_only(near.variant) else usual


def _single_faults(
    refs: References,
    hyps: list[Hypothesis],
    variants: list[Variant],
    names: list[str],
    cand: Callable[[int, Variant, tuple[str, ...], nn.Module], Candidate],
) -> list[Candidate]:
    """Every fault alone on every reference (mapping hypothesis × variant) it has something to change in; the
    references split over two cores (``parallel.split_map``), the candidates in the same order."""

    def on(key: tuple[int, Variant]) -> list[Candidate]:
        i, v = key
        ref = refs.build(i, hyps[i], v)
        out = []
        for name in names:
            try:
                with inject(ref, name):
                    out.append(cand(i, v, (name,), ref))
            except ValueError:  # the fault has nothing to change in this variant
                continue
        return out

    keys = [(i, v) for i in range(len(hyps)) for v in variants]
    return [c for per_ref in split_map(on, keys) for c in per_ref]


def _nearest(
    cands: list[Candidate], refs: References, hyps: list[Hypothesis], completed: Callable[[Candidate], None]
) -> list[dict[str, Any]]:
    """The three candidates nearest the learner's output, for the report. A pair's candidate may hold only its
    runs up to the first past the tolerance (a lower bound): those among the three are run whole and the ranking
    taken again, until the three are exact, so the answer is the one every run would give."""
    ranked = sorted(cands, key=lambda c: c.distance)
    while any(not c.complete for c in ranked[:3]):
        for c in ranked[:3]:
            if not c.complete:
                completed(c)
        ranked = sorted(cands, key=lambda c: c.distance)
    return [
        {
            "fault": split(c.fault)[0] if c.fault else None,
            "mapping": hyps[c.hyp].style,
            **refs.describe(c.variant),
            "max_abs_diff": _num(c.distance),
            "faults": names_of(c.faults),
            **({"sub_layer": where_of(c.faults)} if where_of(c.faults) else {}),
        }
        for c in ranked[:3]
    ]


def _unexplained(
    subject: CheckedModule,
    refs: References,
    hyps: list[Hypothesis],
    best: Candidate,
    scenarios: list[Scenario],
    tol: float,
    scale: float,
    nearest: list[dict[str, Any]],
) -> Diagnosis:
    """Nothing reproduces the output: where the first difference appears, next to the nearest references."""
    ref = refs.build(best.hyp, hyps[best.hyp], best.variant)
    first = first_difference(subject, ref, hyps[best.hyp], scenarios, tol)
    return Diagnosis(
        "unexplained",
        hypothesis=hyps[best.hyp],
        variant=refs.describe(best.variant),
        distance_correct=best.distance,
        scale=scale,
        nearest=nearest,
        first_difference=first,
        key=(best.hyp, best.variant),
    )


LAYOUT = "heads_interleaved"  # a valid attention, but only with its weights laid out in another order


def _relaid(refs: References, hyp: Hypothesis, v: Variant, distance: float) -> Diagnosis | None:
    """A match whose mapping reads the learner's q projection with its rows interleaved (feature ``j·H + h`` in
    head ``h``, from the dataflow): the module computes an attention, but a checkpoint laid out as the post's would
    feed other heads. Named as the layout pitfall, beside the match."""
    if records.get(LAYOUT) is None:
        return None
    src = next((s for k, s in hyp.sources.items() if k.endswith("q_proj.weight")), None)
    user = None if src is None else refs.params.get(src.user)
    if src is None or user is None or user.dim() != 2 or refs.h < 2:
        return None
    try:
        read = src.fn(refs.params)
    except Exception:  # noqa: BLE001 - a reader that cannot run here names nothing
        return None
    n = user.shape[0]
    if read.shape != user.shape or n % refs.h or torch.equal(read, user):
        return None
    dh = n // refs.h
    interleaved = torch.tensor([j * refs.h + h for h in range(refs.h) for j in range(dh)])
    if not torch.equal(read, user[interleaved]):
        return None
    return Diagnosis(
        "fault",
        "the weights match only with their rows interleaved across the heads",
        fault=LAYOUT,
        faults=[LAYOUT],
        hypothesis=hyp,
        variant=refs.describe(v),
        distance_correct=distance,
        distance_fault=distance,
        key=None,
    )


RANDOM = "dropout_at_eval"  # the pitfall whose output changes from call to call in eval mode


def random_at_eval(subject: CheckedModule, sc: Scenario, tol: float) -> float | None:
    """How much a second identical call (the module in eval mode) differs from the first, when by more than
    ``tol``: randomness left on at evaluation (functional dropout without ``training=self.training``). No
    reference can reproduce a random output, so no fault is tried then. NaN in the same places is equal."""
    try:
        again, _ = subject.run(sc.x, sc.user_mask)
    except CallError:
        return None
    a, b = sc.out[sc.rows], again[sc.rows]
    if a.shape != b.shape:
        return None
    d = (a - b).abs().masked_fill(a.isnan() & b.isnan(), 0.0).nan_to_num(math.inf)
    worst = float(d.max()) if d.numel() else 0.0
    return worst if worst > tol else None


def _partial(cands: list[Candidate], tol: float) -> Candidate | None:
    """A single fault that reproduces the learner on more of the runs than the correct reference does (all but
    one transposed causal mask, say): the known pitfall, named beside what it leaves unexplained."""
    best = None
    for c in cands:
        if len(c.faults) != 1:
            continue
        base = next((o for o in cands if not o.faults and o.hyp == c.hyp and o.variant == c.variant), None)
        ok = {k for k, d in c.per.items() if d <= tol}
        ok0 = set() if base is None else {k for k, d in base.per.items() if d <= tol}
        if not ok or not ok > ok0:
            continue
        key = (-len(ok), sum(c.per.values()))
        if best is None or key < best[0]:
            best = (key, c)
    return None if best is None else best[1]
