"""Rule helpers: per-seed outcomes to a verdict with its reasons in both languages, and the numbers formatted."""

from __future__ import annotations

import collections
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from anatomy.experiments.fitting import BLOWN_UP
from anatomy.experiments.registry import Metric, Verdict

TOL = 0.05  # nats: the smallest difference of two losses that a rule counts as a difference (§4, §5 grids)


def per_seed(metrics: dict[str, Metric], *names: str) -> list[tuple[float, ...]]:
    """Several metrics seed by seed, ``[(a0, b0), (a1, b1), ...]``, for rules that combine them per seed."""
    return list(zip(*(metrics[n].values for n in names)))


def differences(metrics: dict[str, Metric], a: str, b: str) -> list[float]:
    """``a − b`` seed by seed."""
    return [x - y for x, y in per_seed(metrics, a, b)]


def setting(metrics: dict[str, Metric], name: str) -> int:
    """A setting the experiment records beside what it measures (a depth, a step cap): the same on every seed,
    as a whole number."""
    return int(metrics[name].values[0])


def fmts(metrics: dict[str, Metric], *names: str) -> dict[str, str]:
    """The metrics ``names``, each formatted as a reason quotes it (mean ± spread), by name."""
    return {k: metrics[k].fmt() for k in names}


def count_seeds(
    metrics: dict[str, Metric], names: tuple[str, ...] | list[str], pred: Callable[..., bool]
) -> tuple[int, int]:
    """How many seeds satisfy ``pred(*values)`` (the values of ``names`` on that seed), and how many seeds."""
    rows = per_seed(metrics, *names)
    return sum(1 for row in rows if pred(*row)), len(rows)


def seeds_disagree(en: str, zh: str) -> Verdict:
    """The last resort of a rule: inconclusive, the numbers ``en``/``zh`` followed by "the seeds disagree"."""
    return Verdict("inconclusive", en + " The seeds disagree.", zh + "各种子结论不一致。")


def decide(en: str, zh: str, *cases: tuple[str, bool, str, str]) -> Verdict:
    """A rule's verdict from its cases in order: the first ``(verdict, holds, more_en, more_zh)`` that holds gives
    ``verdict``, its reasons the numbers ``en``/``zh`` followed by ``more_en``/``more_zh``; when none holds,
    :func:`seeds_disagree`. ``holds`` is already decided over the seeds (``all(...)``, ``not any(...)``)."""
    for verdict, holds, more_en, more_zh in cases:
        if holds:
            return Verdict(verdict, en + more_en, zh + more_zh)
    return seeds_disagree(en, zh)


def all_or_none(holds: list[bool], en: str, zh: str, *, refute_en: str = "", refute_zh: str = "") -> Verdict:
    """Supported if the claim ``holds`` on every seed, refuted if on none (the numbers ``en``/``zh`` followed by
    ``refute_en``/``refute_zh``), otherwise :func:`seeds_disagree`."""
    if all(holds):
        return Verdict("supported", en, zh)
    if not any(holds):
        return Verdict("refuted", en + refute_en, zh + refute_zh)
    return seeds_disagree(en, zh)


VERDICT_ZH = {"supported": "成立", "refuted": "不成立", "nuanced": "有条件成立", "inconclusive": "无定论"}


def seed_verdict(
    ms: dict[str, Metric],
    names: Sequence[str],
    classify: Callable[..., str],
    en: str,
    zh: str,
    lead: dict[str, tuple[str, str]] | None = None,
) -> Verdict:
    """``classify(*values_of_one_seed) -> verdict`` (a function, or a :class:`Ladder`, whose deciding case the
    reasons then name); the claim's verdict if every seed gives the same one, else inconclusive. ``en``/``zh`` are
    the reasons (already filled with the numbers); ``lead`` optionally maps a verdict to an opening sentence
    ``(en, zh)`` that says in words what the numbers mean."""
    rows = per_seed(ms, *names)
    cats = [classify(*row) for row in rows]
    counts = collections.Counter(cats)
    if len(counts) == 1:
        if isinstance(classify, Ladder):  # the seeds agree: name the case(s) that decided
            for why_en, why_zh in dict.fromkeys(classify.because(*row) for row in rows):
                en, zh = en + why_en, zh + why_zh
        first = (lead or {}).get(cats[0])
        if first:
            return Verdict(cats[0], f"{first[0]} {en}", f"{first[1]}{zh}")
        return Verdict(cats[0], en, zh)
    split = ", ".join(f"{v} {n}" for v, n in counts.items())
    split_zh = "，".join(f"{VERDICT_ZH[v]} {n}" for v, n in counts.items())
    return Verdict("inconclusive", f"The seeds disagree ({split}). {en}", f"各随机种子结论不一致（{split_zh}）。{zh}")


def fmt_values(values: list[float], unit: str = "", digits: int = 3) -> str:
    """Mean ± spread of per-seed values derived inside a rule, formatted like a recorded metric."""
    if values and len(set(values)) == 1 and float(values[0]).is_integer():
        return f"{int(values[0])}{unit}"
    return Metric("derived", [float(v) for v in values], unit).fmt(digits)


def fmt_blown(metric: Metric, zh: bool = False) -> str:
    """A metric that ``finite_metrics`` may have capped: say "not finite" instead of printing the cap."""
    blown = sum(abs(v) >= BLOWN_UP for v in metric.values)
    if not blown:
        return metric.fmt()
    if blown == metric.n:
        return "非有限（训练发散）" if zh else "not finite (training diverged)"
    kept = type(metric)(metric.name, [v for v in metric.values if abs(v) < BLOWN_UP], metric.unit)
    return (
        f"{kept.fmt()}（另有 {blown}/{metric.n} 个种子发散）"
        if zh
        else f"{kept.fmt()} ({blown} of {metric.n} seeds diverged)"
    )


def fmt_count(metric: Metric) -> str:
    """A metric that is a whole number on every seed, printed as one (``3`` rather than ``3 ± 0``)."""
    vals = metric.values
    if all(float(v).is_integer() for v in vals) and len(set(vals)) == 1:
        return str(int(vals[0]))
    return metric.fmt()


@dataclass(frozen=True)
class Case:
    """One step of a rule: ``verdict`` when ``holds(*values of one seed)``; ``en``/``zh`` say the condition in words,
    thresholds filled in from the same constants ``holds`` uses."""

    verdict: str
    en: str
    zh: str
    holds: Callable[..., bool]


@dataclass(frozen=True)
class Ladder:
    """A rule declared once: its cases in order, the first that holds on a seed decides (else ``otherwise``).
    :meth:`text` writes the rule text and :func:`seed_verdict` names the deciding case in the reasons, so a
    threshold is typed in one place."""

    cases: tuple[Case, ...]
    otherwise: str = "inconclusive"
    otherwise_en: str = "none of the rule's cases holds"  # what "otherwise" means here, in words
    otherwise_zh: str = "规则的各条件均不满足"

    def decide(self, *values: float) -> Case | None:
        return next((c for c in self.cases if c.holds(*values)), None)

    def __call__(self, *values: float) -> str:
        case = self.decide(*values)
        return case.verdict if case else self.otherwise

    def text(self, before: str = "") -> str:
        steps = "; ".join(f"{c.verdict} if {c.en}" for c in self.cases)
        return (f"{before} Per seed: {steps}; otherwise {self.otherwise}. Inconclusive if the seeds disagree.").lstrip()

    def because(self, *values: float) -> tuple[str, str]:
        """``(en, zh)``: the sentence naming the case that decided on these values."""
        case = self.decide(*values)
        if case is None:
            return (
                f" Decided: {self.otherwise_en} ({self.otherwise}).",
                f"判定：{self.otherwise_zh}（{VERDICT_ZH[self.otherwise]}）。",
            )
        return f" Decided: {case.en} ({case.verdict}).", f"判定：{case.zh}（{VERDICT_ZH[case.verdict]}）。"


def num(x: float) -> str:
    """A threshold as the rule texts write it: ``1e-9``, ``1e-3``, ``0.05``, ``1.5`` (small ones in exponent form,
    without the exponent's zeros)."""
    if x and abs(x) <= 1e-3:
        mantissa, _, exponent = f"{x:e}".partition("e")
        return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"
    return f"{x:g}"
