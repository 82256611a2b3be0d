"""One record per pitfall: everything the project says and does about one mistake, in one place.

    from anatomy.pitfalls import records
    p = records.get("no_scaling")
    p.title("zh"), p.summary_en, p.post_zh, p.hint("en")   # what the report and the course say
    p.symptoms, p.pointer, p.diagnosis                      # what the doctor does with it
    p.apply                                                 # how the bug zoo switches it on (None: it cannot)

The doctor's tables (which faults a diagnosis tries, which symptoms a fault explains, which lines a finding points
at), the report's titles, the course's hints and the bug zoo (``anatomy.pitfalls.FAULTS``) are all read from
:data:`RECORDS`; nothing else lists pitfalls. A new pitfall is one :class:`Pitfall` added to a catalogue
(``pitfalls/catalog_attention.py``, ``pitfalls/catalog_block.py``) or, for a test or a plug-in, passed to
:func:`register`. ``docs/architecture.md`` ("Adding a pitfall") walks through one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

KINDS = ("attention", "mask", "block", "norm", "positional", "model")
SEVERITIES = ("error", "warning")
DIAGNOSES = ("attention", "block")  # attention: tried on every module; block: tried on blocks only
NEEDS = ("padding", "causal")
POINTERS = (
    "scale",
    "scale_after",
    "softmax",
    "dropout",
    "split",
    "merge",
    "mask",
    "norms",
    "init",
)  # rules of doctor/report/pointers.py


@dataclass(frozen=True)
class Pitfall:
    """One mistake. The first fields are what a reader shows; the rest say how the doctor finds it, where a finding
    points, what the course hints, and how the bug zoo switches it on in our own modules."""

    name: str
    kind: str  # one of KINDS: the code it lives in ("mask": the masking of the attention scores)
    severity: str  # "error": real tokens get a wrong output; "warning": a hazard that leaves real tokens right
    title_en: str  # a short headline
    title_zh: str
    summary_en: str  # the explanation
    summary_zh: str
    section: str  # the post's section, "§2.4" ("" when the post does not discuss it)
    post_zh: str | None  # the post's sentence the pitfall breaks (None: the post has none)
    hides_in: str  # where it usually hides, in code
    hint_en: str | None = None  # the course's hint, in an exercise's terms (None: the exercise's own hint)
    hint_zh: str | None = None
    apply: Callable[..., None] | None = field(default=None, repr=False)  # (module, undo, **params): the bug zoo's
    defaults: Mapping[str, Any] = field(default_factory=dict)  # apply's parameters
    diagnosis: str | None = None  # one of DIAGNOSES: the doctor tries it on its reference (None: it does not)
    tries: tuple[Mapping[str, Any], ...] = ()  # further parameter sets the diagnosis tries under the same name
    sub_layers: bool = False  # a block fault the diagnosis also tries on one sub-layer alone ("name@attn")
    needs: str | None = None  # one of NEEDS: a diagnosis without that mask run cannot see it
    symptoms: frozenset[str] = frozenset()  # probes whose errors it causes (of a pair, which explains a symptom)
    points_for: tuple[str, ...] = ()  # probes that, failing with no fault named, point at this pitfall's lines
    pointer: str | None = None  # one of POINTERS: how a finding finds the learner's line (None: no pointer)
    course: tuple[str, ...] = ()  # the course's names for the same mistake (anatomy/course)

    def __post_init__(self) -> None:
        problems = problems_of(self)
        if problems:
            raise ValueError(f"pitfall {self.name!r}: {'; '.join(problems)}")

    @property
    def mask(self) -> bool:
        """A fault in the masking of the scores (the doctor records a masked forward to point at it)."""
        return self.kind == "mask"

    @property
    def zoo(self) -> bool:
        """The bug zoo can switch it on in our own modules (``anatomy.pitfalls.apply``)."""
        return self.apply is not None

    def title(self, lang: str = "en") -> str:
        return self.title_zh if lang == "zh" else self.title_en

    def summary(self, lang: str = "en") -> str:
        return self.summary_zh if lang == "zh" else self.summary_en

    def hint(self, lang: str = "en") -> str | None:
        return self.hint_zh if lang == "zh" else self.hint_en


def problems_of(p: Pitfall) -> list[str]:
    """What a record lacks or gets wrong for its readers (empty when it is complete)."""
    out = []
    if not p.name or not p.name.replace("_", "").isalnum() or p.name != p.name.lower():
        out.append("the name must be lower_snake_case")
    for label, value, allowed in (
        ("kind", p.kind, KINDS),
        ("severity", p.severity, SEVERITIES),
        ("diagnosis", p.diagnosis, (None, *DIAGNOSES)),
        ("needs", p.needs, (None, *NEEDS)),
        ("pointer", p.pointer, (None, *POINTERS)),
    ):
        if value not in allowed:
            out.append(f"{label} must be one of {allowed}, got {value!r}")
    for label in ("title_en", "title_zh", "summary_en", "summary_zh", "hides_in"):
        if not str(getattr(p, label) or "").strip():
            out.append(f"{label} is empty")
    if p.section and not p.section.startswith("§"):
        out.append(f"section must start with §, got {p.section!r}")
    if p.post_zh is not None and (not p.post_zh.strip() or not p.section):
        out.append("a post sentence needs its section, and text")
    if (p.hint_en is None) != (p.hint_zh is None):
        out.append("the hint needs both languages")
    if p.diagnosis is not None and p.apply is None and p.name not in DOCTOR_ONLY:
        out.append("a diagnosed pitfall needs apply (or a doctor-side injector in DOCTOR_ONLY)")
    if (p.tries or p.sub_layers or p.needs) and p.diagnosis is None:
        out.append("tries/sub_layers/needs only mean something for a diagnosed pitfall")
    if p.defaults and p.apply is None:
        out.append("defaults without apply")
    if not isinstance(p.symptoms, frozenset):
        out.append("symptoms must be a frozenset")
    return out


# Pitfalls the doctor switches on with its own injector (doctor/diagnosis/sublayer.py) rather than the bug zoo's.
DOCTOR_ONLY = frozenset({"norm_on_query_only"})

RECORDS: dict[str, Pitfall] = {}


def add(*pitfalls: Pitfall) -> None:
    """Add catalogue records (at import of ``anatomy.pitfalls``); a name may be added once."""
    for p in pitfalls:
        if p.name in RECORDS or p.name in _aliases():
            raise ValueError(f"pitfall {p.name!r} is recorded twice")
        RECORDS[p.name] = p


def register(p: Pitfall) -> Callable[[], None]:
    """Add ``p`` to the records (a plug-in's or a test's pitfall); returns the function that removes it again."""
    add(p)

    def remove() -> None:
        if RECORDS.get(p.name) is p:
            del RECORDS[p.name]

    return remove


def _aliases() -> dict[str, str]:
    return {alias: p.name for p in RECORDS.values() for alias in p.course}


def get(name: str | None) -> Pitfall | None:
    """The record named ``name``, or whose course name it is; None when none is."""
    if not name:
        return None
    return RECORDS.get(name) or RECORDS.get(_aliases().get(name, ""))


def title(name: str, lang: str = "en") -> str:
    """The record's headline (``name`` itself when there is no record)."""
    p = get(name)
    return name if p is None else p.title(lang)


def hint(name: str | None) -> tuple[str, str] | None:
    """The course's hint for ``name`` as (en, zh), None when the record gives none."""
    p = get(name)
    if p is None or p.hint_en is None or p.hint_zh is None:
        return None
    return p.hint_en, p.hint_zh


def every(**where: Any) -> Iterator[Pitfall]:
    """The records whose fields equal ``where`` (``every(diagnosis="block")``), in the catalogue's order."""
    for p in list(RECORDS.values()):
        if all(getattr(p, k) == v for k, v in where.items()):
            yield p


def names(**where: Any) -> list[str]:
    return [p.name for p in every(**where)]


def zoo() -> dict[str, Pitfall]:
    """The bug zoo: the records ``anatomy.pitfalls.apply`` can switch on."""
    return {p.name: p for p in RECORDS.values() if p.zoo}


def mask_faults() -> set[str]:
    return {p.name for p in RECORDS.values() if p.mask}


def symptoms(name: str) -> frozenset[str]:
    p = RECORDS.get(name)
    return frozenset() if p is None else p.symptoms


def for_probe(probe: str | None) -> str | None:
    """The pitfall a failing probe points at when no fault is named (``points_for``)."""
    return next((p.name for p in RECORDS.values() if probe and probe in p.points_for), None)


def severity(name: str) -> str:
    p = RECORDS.get(name)
    if p is None:
        raise KeyError(f"no pitfall record named {name!r}")
    return p.severity


__all__ = [
    "DIAGNOSES",
    "KINDS",
    "NEEDS",
    "POINTERS",
    "RECORDS",
    "Pitfall",
    "add",
    "every",
    "for_probe",
    "get",
    "hint",
    "mask_faults",
    "names",
    "problems_of",
    "register",
    "severity",
    "symptoms",
    "title",
    "zoo",
]
