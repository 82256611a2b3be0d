"""Findings and the report: text for a terminal (English or Chinese, wrapped to the terminal's width, CJK counted
as two columns) and JSON with a stable schema (docs/doctor.md, ``SCHEMA = "anatomy.doctor/1"``)."""

from __future__ import annotations

import json
import math
import re
import unicodedata
from dataclasses import dataclass, field
from typing import Any

from anatomy.doctor.report.found import found_lines
from anatomy.doctor.report.words import _t
from anatomy.pitfalls import records

SCHEMA = "anatomy.doctor/1"
SEVERITIES = ("error", "warning")

PROBE_TITLES = {  # probe id → (en, zh)
    "shape": ("shape", "形状"),
    "finite": ("finite output", "输出有限"),
    "mask": ("mask", "mask"),
    "causal_leak": ("causal leak", "因果泄漏"),
    "padding_leak": ("padding leak", "padding 泄漏"),
    "token_order": ("token order", "词序"),
    "batch_independence": ("batch rows independent", "batch 各行独立"),
    "scaling": ("scaling", "缩放"),
    "fully_masked": ("fully-masked rows", "整行被遮住"),
    "float16_fill": ("float16 mask fill", "float16 下的 mask 填充"),
    "norm_parameters": ("separate norm parameters", "各自的 Norm 参数"),
    "residual": ("residual", "残差"),
    "norm_placement": ("norm placement", "Norm 位置"),
    "ffn_width": ("FFN width", "FFN 宽度"),
    "diagnosis": ("diagnosis", "诊断"),
    "dataflow": ("recorded dataflow", "记录的数据流"),
    "*": ("all other probes", "其余探针"),
}


@dataclass
class Finding:
    probe: str
    severity: str  # "error" | "warning"
    en: str
    zh: str
    evidence: dict[str, Any] = field(default_factory=dict)
    fault: str | None = None  # a bug-zoo name when the probe identifies the fault itself
    explained_by: str | None = None  # a symptom of the fault the diagnosis named
    # the learner's lines behind it (pointers.py): {line, source, en, zh}
    where: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.severity not in SEVERITIES:
            raise ValueError(f"severity must be one of {SEVERITIES}, got {self.severity!r}")

    def text(self, lang: str) -> str:
        return self.zh if lang == "zh" else self.en

    def to_dict(self) -> dict[str, Any]:
        return {
            "probe": self.probe,
            "severity": self.severity,
            "fault": self.fault,
            "explained_by": self.explained_by,
            "message": {"en": self.en, "zh": self.zh},
            "evidence": {k: _jsonable(v) for k, v in self.evidence.items()},
            "where": self.where,
        }


def _jsonable(v: object) -> object:
    if isinstance(v, float) and (math.isnan(v) or math.isinf(v)):
        return None
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, dict):
        return {k: _jsonable(x) for k, x in v.items()}
    return v


@dataclass
class Report:
    target: str
    kind: str
    settings: dict[str, Any]
    found: dict[str, Any]
    findings: list[Finding]
    passed: list[str]
    skipped: list[dict[str, Any]]  # {"probe", "en", "zh"}
    diagnosis: dict[str, Any]

    @property
    def faults(self) -> set[str]:
        """The bug-zoo names the doctor found (probes that identify a fault, and the diagnosis)."""
        return {f.fault for f in self.findings if f.fault}

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "error"]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "warning"]

    def groups(self) -> list[tuple[str | None, list[Finding]]]:
        """Findings grouped by the fault they name or are explained by; unexplained findings stand alone."""
        named: dict[str, list[Finding]] = {}
        alone: list[Finding] = []
        for f in self.findings:
            key = f.fault or f.explained_by
            (named.setdefault(key, []) if key else alone).append(f)
        out = [(k, v) for k, v in named.items()] + [(None, [f]) for f in alone]
        return sorted(out, key=lambda kv: 0 if any(f.severity == "error" for f in kv[1]) else 1)

    def counts(self) -> tuple[int, int]:
        errors = warnings = 0
        for _, fs in self.groups():
            if any(f.severity == "error" for f in fs):
                errors += 1
            else:
                warnings += 1
        return errors, warnings

    def exit_code(self, strict: bool = False) -> int:
        errors, warnings = self.counts()
        return 1 if errors or (strict and warnings) else 0

    def to_dict(self, strict: bool = False) -> dict[str, Any]:
        errors, warnings = self.counts()
        return {
            "schema": SCHEMA,
            "target": self.target,
            "kind": self.kind,
            "settings": self.settings,
            "found": _jsonable(self.found),
            "findings": [f.to_dict() for f in self.findings],
            "faults": sorted(self.faults),
            "passed": self.passed,
            "skipped": self.skipped,
            "diagnosis": _jsonable(self.diagnosis),
            "summary": {"errors": errors, "warnings": warnings, "exit_code": self.exit_code(strict)},
        }

    def to_json(self, strict: bool = False) -> str:
        return json.dumps(self.to_dict(strict), ensure_ascii=False, indent=2)

    def render(self, lang: str = "en", width: int = 80, strict: bool = False) -> str:
        return "\n".join(_render(self, lang, width, strict))


# --- text ---------------------------------------------------------------------------------------------------------


def display_width(s: str) -> int:
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in s)


_TOKEN = re.compile(
    r"[\u2e80-\u9fff\uf900-\ufaff\uff00-\uffef\u3000-\u303f]|[^\s\u2e80-\u9fff\uf900-\ufaff"
    r"\uff00-\uffef\u3000-\u303f]+|\s+"
)


NO_LINE_START = set("。，、；：！？）」』】》")


def wrap(text: str, width: int, first: str = "", rest: str | None = None) -> list[str]:
    """Greedy wrap by display width: Latin words stay whole (unless longer than a line), CJK characters break
    anywhere. ``first`` prefixes the first line, ``rest`` the others."""
    rest = first if rest is None else rest
    lines: list[str] = []
    line, base, space = first, first, False
    for tok in _TOKEN.findall(text):
        if tok.isspace():
            space = line != base
            continue
        piece = (" " if space else "") + tok
        space = False
        if display_width(line + piece) <= width:
            line += piece
        elif line != base and display_width(rest + tok) <= width:
            carry = ""
            if tok in NO_LINE_START and len(line) > len(base) + 1 and not piece.startswith(" "):
                line, carry = line[:-1], line[-1]  # closing punctuation never starts a line
            lines.append(line)
            line = base = rest
            line += carry + tok
        else:  # longer than a line: cut it
            for ch in piece:
                if display_width(line + ch) > width:
                    lines.append(line)
                    line = base = rest
                    if ch == " ":
                        continue
                line += ch
    if line != base or not lines:
        lines.append(line)
    return [ln.rstrip() for ln in lines]


def _fault_lines(fault: str, mark: str, lang: str, width: int) -> list[str]:
    """A group's headline and its pitfall's record: the explanation, the post's sentence, where it hides."""
    z = records.get(fault)
    if z is None:
        return wrap(f"{mark} · {fault} · {fault}", width, rest="    ")
    section = f", {_t(lang, 'post', '原文')} {z.section}" if z.section and z.post_zh else ""
    out = wrap(f"{mark} · {z.title(lang)} · {fault}{section}", width, rest="    ")
    out += wrap(z.summary(lang), width, first="    ")
    if z.post_zh:
        out += wrap(_t(lang, "post: ", "原文：") + z.post_zh, width, first="    ", rest="      ")
    out += wrap(_t(lang, "look at: ", "常见位置：") + z.hides_in, width, first="    ", rest="      ")
    return out


def where_lines(f: Finding, shown: set[tuple[Any, ...]], lang: str, width: int) -> list[str]:
    """The learner's lines of a finding (``f.where``), each once per group: ``shown`` holds those already written."""
    out: list[str] = []
    for w in f.where:
        if (w["line"], w["en"]) not in shown:
            shown.add((w["line"], w["en"]))
            out += wrap(w["zh" if lang == "zh" else "en"], width, first="      → ", rest="        ")
    return out


def passed_lines(passed: list[str], skipped: list[dict[str, Any]], lang: str, width: int) -> list[str]:
    """The report's "passed" line and one line per skipped probe, with its reason."""
    joined = _t(lang, ", ", "、").join(PROBE_TITLES.get(p, (p, p))[1 if lang == "zh" else 0] for p in passed) or "-"
    out = wrap(joined, width, first=_t(lang, "passed   ", "通过     "), rest=" " * 9)
    for sk in skipped:
        title = PROBE_TITLES.get(sk["probe"], (sk["probe"], sk["probe"]))[1 if lang == "zh" else 0]
        out += wrap(
            title + _t(lang, ": ", "：") + sk["zh" if lang == "zh" else "en"],
            width,
            first=_t(lang, "skipped  ", "跳过     "),
            rest=" " * 11,
        )
    return out


def _render(r: Report, lang: str, width: int, strict: bool) -> list[str]:
    s = r.settings
    out = [f"anatomy check · {r.target}"]
    out += wrap(
        f"{r.kind} · d_model={s['d_model']}, n_heads={s['n_heads']}, d_k={s['head_dim']} · "
        f"float64, B={s['batch']}, T={s['seq']}, seed {s['seed']}",
        width,
    )
    out.append("")
    out.append(_t(lang, "found", "发现"))
    for key, text in found_lines(r, lang):
        pad = key + " " * max(1, 10 - display_width(key))
        out += wrap(text, width, first="  " + pad, rest=" " * 12)
    for fault, fs in r.groups():
        shown: set[tuple[int, str]] = set()
        out.append("")
        sev = "error" if any(f.severity == "error" for f in fs) else "warning"
        mark = ("✗ " + _t(lang, "error", "错误")) if sev == "error" else ("! " + _t(lang, "warning", "警告"))
        if fault:
            out += _fault_lines(fault, mark, lang, width)
        else:
            f = fs[0]
            out += wrap(
                f"{mark} · {PROBE_TITLES.get(f.probe, (f.probe, f.probe))[1 if lang == 'zh' else 0]}",
                width,
                rest="    ",
            )
        for f in fs:
            title = PROBE_TITLES.get(f.probe, (f.probe, f.probe))[1 if lang == "zh" else 0]
            out += wrap(
                title + _t(lang, ": ", "：") + f.text(lang) if fault else f.text(lang),
                width,
                first="    - ",
                rest="      ",
            )
            out += where_lines(f, shown, lang, width)  # the learner's line, from the recorded forward
    out.append("")
    out += passed_lines(r.passed, r.skipped, lang, width)
    errors, warnings = r.counts()
    code = r.exit_code(strict)
    out.append("")
    out.append(
        _t(
            lang,
            f"{errors} error{'s' * (errors != 1)}, {warnings} warning{'s' * (warnings != 1)} → exit {code}",
            f"{errors} 个错误，{warnings} 个警告 → 退出码 {code}",
        )
    )
    return out
