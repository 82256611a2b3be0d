"""What a diagnosis says: the candidates it compares (a reference, with no fault, one or a pair) and its verdict,
with the JSON the report writes."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from anatomy.doctor.diagnosis.references import Variant
from anatomy.doctor.diagnosis.sublayer import split
from anatomy.doctor.mapping.naming import Hypothesis

TOL = 1e-6  # relative to max(1, max |output|); faithful float64 code agrees to ~1e-13, faults differ by > 1e-3


@dataclass
class Candidate:
    hyp: int
    variant: Variant
    faults: tuple[str, ...]  # () for the correct reference, one fault, or a pair (keys: ``name[@sub-layer]``)
    distance: float
    per: dict[str, float] = field(default_factory=dict)  # scenario name → distance
    complete: bool = True  # False: runs stopped at the first past the tolerance (``distance`` a lower bound)

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
    variant: dict[str, Any] = field(default_factory=dict)
    distance_correct: float | None = None
    distance_fault: float | None = None
    scale: float = 1.0
    nearest: list[dict[str, Any]] = field(default_factory=list)
    first_difference: dict[str, Any] | None = None
    key: tuple[int, Variant] | None = None  # (hypothesis index, variant) of the reference that explains the output best
    sub_layer: str | None = None  # "attn" | "ffn": the block fault sits in that sub-layer only
    unexplained: dict[str, Any] | None = (
        None  # a known fault named, and what it still leaves different (scenarios, size)
    )
    pairs: dict[str, Any] | None = None  # the pair stage, when it ran: {tried, untried, every_pair}

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "reason": self.reason or None,
            "fault": self.fault,
            "also": self.also,
            "mapping": None if self.hypothesis is None else self.hypothesis.style,
            "variant": self.variant,
            "max_abs_diff_vs_reference": _num(self.distance_correct),
            "max_abs_diff_vs_faulty_reference": _num(self.distance_fault),
            "output_scale": _num(self.scale),
            "nearest": self.nearest,
            "first_difference": self.first_difference,
            "faults": self.faults,
            "also_pairs": self.also_pairs,
            "sub_layer": self.sub_layer,
            "unexplained": self.unexplained,
            "pairs": self.pairs,
        }


def _num(v: float | None) -> float | None:
    if v is None:
        return None
    return None if math.isinf(v) or math.isnan(v) else float(v)


def names_of(keys: tuple[str, ...]) -> list[str]:
    return [split(k)[0] for k in keys]


def where_of(keys: tuple[str, ...]) -> str | None:
    return next((split(k)[1] for k in keys if split(k)[1]), None)
