"""Two faults at once: which pairs of faults the zoo can switch on together on one reference, and which of them a
diagnosis tries, likeliest first.

A block that matches none of the references (QK-norm, GQA with its own head size, a sliding window) has no single
fault that reproduces it, and every compatible pair on every mapping hypothesis and reference variant is ~17,000
runs. The pairs are therefore ranked by how near each of their two faults alone brings that reference to the
learner's output (the sum of the two single-fault distances), and at most :data:`PAIR_BUDGET` of them are run; the
diagnosis says how many were tried and how many were left when it stops there. On the doctor's own tests and on
synthetic blocks with two faults on, every pair that reproduces the output ranked within the first 120 (of up to
20,416).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from torch import nn

from anatomy.doctor.diagnosis.parallel import split_map
from anatomy.doctor.diagnosis.references import Variant
from anatomy.doctor.diagnosis.sublayer import inject
from anatomy.doctor.diagnosis.verdicts import Candidate

PAIR_BUDGET = 1000  # pairs run at most per diagnosis, likeliest first


@dataclass
class PairSearch:
    """What the pair stage did: ``tried`` pairs run; ``untried`` pairs of applicable faults left when the budget ran
    out (some of them would not have been compatible)."""

    tried: int
    untried: int

    def to_dict(self) -> dict[str, int | bool]:
        return {"tried": self.tried, "untried": self.untried, "every_pair": self.untried == 0}


def which_pairs(search: dict[str, Any] | None) -> tuple[str, str]:
    """How the report names the pairs tried (en, zh): "a pair of them" when every compatible pair ran, else how
    many of the likeliest ran and how many were left (a diagnosis's ``pairs``)."""
    if not search or search.get("every_pair", True):
        return "a pair of them", "两个错误的组合"
    tried, left = search["tried"], search["untried"]
    return (
        f"any of the {tried:,} likeliest pairs of them ({left:,} pairs left untried)",
        f"最可能的 {tried:,} 个两错误组合（另有 {left:,} 个组合未试）",
    )


def untried_note(search: dict[str, Any] | None) -> tuple[str, str]:
    """Beside a named pair when the search stopped at the budget: another, untried pair could reproduce it too."""
    if not search or search.get("every_pair", True):
        return "", ""
    tried, left = search["tried"], search["untried"]
    return (
        f" (the {tried:,} likeliest pairs were tried and {left:,} left untried: another pair may reproduce it too)",
        f"（试了最可能的 {tried:,} 个组合，另有 {left:,} 个未试：可能还有别的组合也能复现）",
    )


def _shadowed(ref: nn.Module, name: str) -> frozenset[tuple[str, str]] | None:
    """The attributes and sub-modules (``(module path, name)``) fault ``name`` shadows on ``ref``; None when it
    changes nothing there, or changes values in place (then it is never paired)."""
    modules = list(ref.named_modules(remove_duplicate=False))

    def state() -> dict[tuple[str, str], int]:
        return {(p, k): id(v) for p, m in modules for k, v in (*vars(m).items(), *m._modules.items())}

    before = state()
    try:
        with inject(ref, name):
            after = state()
    except ValueError:  # nothing to change in this reference
        return None
    changed = frozenset(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    return changed or None


def compatible_pairs(ref: nn.Module, names: list[str]) -> list[tuple[str, str]]:
    """Pairs of faults the zoo can switch on together on ``ref``: each shadows attributes of the reference's
    instances (``pitfalls.apply``) and undoes exactly that, so two that shadow different attributes compose, in
    either order. Two that shadow the same one (both scales; two attention faults of the same step, which each take
    that step's wrapper slot; two rewirings of the residual) would silently keep only the second, and are not paired."""
    shadowed = {n: _shadowed(ref, n) for n in names}
    usable = [n for n in names if shadowed[n] is not None]
    sets = {n: s for n, s in shadowed.items() if s is not None}
    return [(a, b) for i, a in enumerate(usable) for b in usable[i + 1 :] if not sets[a] & sets[b]]


Ranked = tuple[float, int, int, Variant, str, str]  # (score, enumeration order, hypothesis, variant, a, b)


def likeliest_pairs(cands: list[Candidate], names: list[str]) -> list[Ranked]:
    """Every pair of faults that each ran alone on the same reference, likeliest first: by the sum of the two
    single-fault distances to the learner's output (a NaN one counts as infinite), ties in the order the exhaustive
    search would take them (references as tried, then the zoo's order within a pair)."""
    singles: dict[tuple[int, Variant], dict[str, float]] = {}
    for c in cands:
        if len(c.faults) == 1:
            d = c.distance
            singles.setdefault((c.hyp, c.variant), {})[c.faults[0]] = math.inf if math.isnan(d) else d
    order = {n: k for k, n in enumerate(names)}
    out: list[Ranked] = []
    for (i, v), dist in singles.items():
        faults = sorted((f for f in dist if f in order), key=order.__getitem__)
        for x, a in enumerate(faults):
            for b in faults[x + 1 :]:
                out.append((dist[a] + dist[b], len(out), i, v, a, b))
    out.sort(key=lambda r: (r[0], r[1]))
    return out


def try_pairs(
    cands: list[Candidate],
    names: list[str],
    build: Callable[[int, Variant], nn.Module],
    run: Callable[[int, Variant, tuple[str, str], nn.Module], Candidate],
    budget: int | None = None,
) -> tuple[list[Candidate], PairSearch]:
    """Run the compatible pairs (:func:`compatible_pairs`' rule), likeliest first, at most ``budget`` of them; the
    candidates come back in the exhaustive search's order, so ties break as they did when every pair was run.
    ``budget``: :data:`PAIR_BUDGET` when None."""
    budget = PAIR_BUDGET if budget is None else budget
    ranked = likeliest_pairs(cands, names)
    shadows: dict[tuple[int, Variant, str], frozenset[tuple[str, str]] | None] = {}

    def shadow(i: int, v: Variant, name: str) -> frozenset[tuple[str, str]] | None:
        if (i, v, name) not in shadows:
            shadows[i, v, name] = _shadowed(build(i, v), name)
        return shadows[i, v, name]

    chosen: list[tuple[int, int, Variant, str, str]] = []
    examined = 0
    for _, k, i, v, a, b in ranked:
        if len(chosen) >= budget:
            break
        examined += 1
        sa, sb = shadow(i, v, a), shadow(i, v, b)
        if sa is None or sb is None or sa & sb:
            continue
        chosen.append((k, i, v, a, b))
    chosen.sort(key=lambda t: t[0])  # the exhaustive search's order: ties break as they did when every pair ran

    def one(pick: tuple[int, int, Variant, str, str]) -> Candidate:
        _, i, v, a, b = pick
        ref = build(i, v)
        with inject(ref, a), inject(ref, b):
            return run(i, v, (a, b), ref)

    return split_map(one, chosen), PairSearch(len(chosen), len(ranked) - examined)
