"""The claim registry: a claim of the post, the experiment that measures it, and the rule that judges it.

A claim is declared *before* anything runs, with the rule that will turn numbers into a verdict:

    supported     the measured numbers satisfy the claim's rule on every seed (or its interval does)
    refuted       they contradict it on every seed (or the interval excludes it)
    nuanced       it holds only under conditions the rule names (e.g. in float32 but not float16)
    inconclusive  the seeds disagree, or the effect is inside the noise

Verdicts are never typed by hand: a rule is a function of the recorded metrics, and the sentence that explains a
verdict is generated from the same numbers. An experiment is a function ``run(trial) -> dict[str, float]`` called
once per seed; several claims may share one experiment (one setup, one verdict each).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the same parser, as a package
    import tomli as tomllib

VERDICTS = ("supported", "refuted", "nuanced", "inconclusive")
CLAIM_PRESETS = ("smoke", "quick", "full", "paper")  # paper: the post's sizes (fitting.POST_SIZES), for a cluster
DEFAULT_SEEDS = {"smoke": 1, "quick": 3, "full": 3, "paper": 5}


@dataclass
class Metric:
    """One metric over seeds: mean, spread and a 95% interval (t-interval; the single value when n = 1)."""

    name: str
    values: list[float]
    unit: str = ""

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def mean(self) -> float:
        return statistics.fmean(self.values)

    @property
    def finite(self) -> bool:
        return all(math.isfinite(v) for v in self.values)

    @property
    def std(self) -> float:
        if not self.finite:
            return float("nan")  # a diverged seed has no spread to speak of; the mean says inf/nan
        return statistics.stdev(self.values) if self.n > 1 else 0.0

    @property
    def ci95(self) -> tuple[float, float]:
        if not self.finite:
            return (float("nan"), float("nan"))
        if self.n < 2:
            return (self.mean, self.mean)
        half = _t95(self.n - 1) * self.std / math.sqrt(self.n)
        return (self.mean - half, self.mean + half)

    def fmt(self, digits: int = 3) -> str:
        if self.n == 1 or not self.finite:
            return f"{_g(self.mean, digits)}{self.unit}"
        return f"{_g(self.mean, digits)} ± {_g(self.std, digits)}{self.unit}"

    def to_dict(self) -> dict[str, Any]:
        lo, hi = self.ci95
        return {
            "mean": _clean(self.mean),
            "std": _clean(self.std),
            "ci95": [_clean(lo), _clean(hi)],
            "values": [_clean(v) for v in self.values],
            "n": self.n,
            "unit": self.unit,
        }


def _clean(x: float) -> float | str:
    return x if math.isfinite(x) else str(x)


def _g(x: float, digits: int) -> str:
    if not math.isfinite(x):
        return str(x)
    if x != 0 and (abs(x) < 1e-3 or abs(x) >= 1e5):
        return f"{x:.{digits - 1}e}"
    return f"{x:.{digits}g}" if abs(x) >= 1 else f"{x:.{digits}f}".rstrip("0").rstrip(".") or "0"


def _t95(df: int) -> float:
    table = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}
    return table.get(df, 2.0 if df > 30 else 2.228)


@dataclass
class Verdict:
    verdict: str
    reason_en: str
    reason_zh: str

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {VERDICTS}, got {self.verdict!r}")


Rule = Callable[[dict[str, Metric]], Verdict]


@dataclass
class Trial:
    """One trial: what a run of an experiment on one seed gets (the preset, the seed, where to put figures, a
    figure recorder, and the device its models and tensors live on: :mod:`anatomy.experiments.devices`)."""

    preset: str
    seed: int
    out_dir: Path
    figures: list[str] = field(default_factory=list)
    first_seed: bool = True
    device: str = "cpu"

    def figure_path(self, name: str) -> Path | None:
        """A path for a figure (PNG) on the first seed only; ``None`` on the other seeds (draw nothing)."""
        if not self.first_seed:
            return None
        path = self.out_dir / "figures" / f"{name}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        self.figures.append(str(path.relative_to(self.out_dir)))
        return path


@dataclass
class Experiment:
    name: str
    fn: Callable[[Trial], dict[str, float]]
    units: dict[str, str] = field(default_factory=dict)
    cpu_only: str = ""  # why it runs on the CPU whatever --device says ("" : it runs on the device asked for)

    def device_for(self, device: str) -> str:
        """The device this experiment runs on when the run asks for ``device``."""
        return "cpu" if self.cpu_only else device


@dataclass
class Claim:
    id: str
    section: str
    statement_zh: str
    statement_en: str
    experiment: str
    metrics: tuple[str, ...]
    rule: Rule
    rule_text: str


EXPERIMENTS: dict[str, Experiment] = {}
CLAIMS: dict[str, Claim] = {}


def experiment(
    name: str, units: dict[str, str] | None = None, *, cpu_only: str = ""
) -> Callable[[Callable[[Trial], dict[str, float]]], Callable[[Trial], dict[str, float]]]:
    """Register ``fn(trial) -> {metric: value}`` as experiment ``name``. ``cpu_only``: the reason it runs on the CPU
    whatever ``--device`` asks (said in claims.json and the report); its ``trial.device`` is then ``cpu``."""

    def wrap(fn: Callable[[Trial], dict[str, float]]) -> Callable[[Trial], dict[str, float]]:
        if name in EXPERIMENTS:
            raise ValueError(f"experiment {name!r} registered twice")
        EXPERIMENTS[name] = Experiment(name, fn, units or {}, cpu_only)
        return fn

    return wrap


def _statements() -> dict[str, dict[str, str]]:
    """The claims' statements, kept as data in ``claims/statements.toml``: per claim id its ``section`` of the
    post, the post's sentence (``zh``) and our English statement (``en``)."""
    text = (resources.files("anatomy.experiments") / "claims" / "statements.toml").read_text(encoding="utf-8")
    table: dict[str, dict[str, str]] = tomllib.loads(text)
    for cid, entry in table.items():
        if sorted(entry) != ["en", "section", "zh"] or not all(isinstance(v, str) and v for v in entry.values()):
            raise ValueError(
                f"statements.toml: [{cid!r}] needs non-empty strings section, zh and en, got {sorted(entry)}"
            )
    return table


STATEMENTS: dict[str, dict[str, str]] = _statements()


def claim(id: str, *, experiment: str, metrics: tuple[str, ...] | list[str], rule_text: str) -> Callable[[Rule], Rule]:
    """Declare claim ``id`` on its rule: ``@claim(id, experiment=..., metrics=..., rule_text=...)`` above
    ``def rule(ms) -> Verdict`` (or applied to a rule a helper built). The statements come from
    ``statements.toml``; the rule is returned unchanged."""
    if id in CLAIMS:
        raise ValueError(f"claim {id!r} registered twice")
    if not id.startswith("C") or not id[1:].split("-")[0].isdigit():
        raise ValueError(f"claim id must start with its number, like 'C20-mask-fill', got {id!r}")
    if id not in STATEMENTS:
        raise ValueError(f"claim {id!r} has no entry in statements.toml")
    said = STATEMENTS[id]

    def register(rule: Rule) -> Rule:
        CLAIMS[id] = Claim(id, said["section"], said["zh"], said["en"], experiment, tuple(metrics), rule, rule_text)
        return rule

    return register


def check_statements() -> None:
    """Every entry of ``statements.toml`` belongs to a declared claim (called once every claim is declared)."""
    orphans = sorted(set(STATEMENTS) - set(CLAIMS))
    if orphans:
        raise ValueError(f"statements.toml: entries without a declared claim: {', '.join(orphans)}")


def claim_number(claim_id: str) -> int:
    return int(claim_id[1:].split("-")[0])


# --- rule helpers: small, explicit, reusable ------------------------------------------------------------------


def _each(m: Metric, pred: Callable[[float], bool]) -> tuple[int, int]:
    hits = sum(1 for v in m.values if pred(v))
    return hits, m.n


def holds_on_every_seed(
    metric: str, pred: Callable[[float], bool], en: str, zh: str, *, refute_en: str = "", refute_zh: str = ""
) -> Rule:
    """Supported if ``pred`` holds on every seed, refuted if on none, inconclusive if the seeds disagree.
    ``en``/``zh`` are templates filled with ``{value}`` (the metric, mean ± spread)."""

    def rule(ms: dict[str, Metric]) -> Verdict:
        m = ms[metric]
        hits, n = _each(m, pred)
        value = m.fmt()
        if hits == n:
            return Verdict("supported", en.format(value=value), zh.format(value=value))
        if hits == 0:
            return Verdict(
                "refuted",
                (refute_en or "Not observed: " + en).format(value=value),
                (refute_zh or "未观察到：" + zh).format(value=value),
            )
        return Verdict(
            "inconclusive",
            f"Seeds disagree ({hits} of {n}): {en.format(value=value)}",
            f"各随机种子结论不一致（{hits}/{n}）：{zh.format(value=value)}",
        )

    return rule


def fact(en: str, zh: str, verdict: str = "supported") -> Rule:
    """For claims judged from sources or by construction (literature, unverifiable): the verdict is declared
    with its reason and the experiment still records what it can measure."""
    return lambda ms: Verdict(verdict, en, zh)
