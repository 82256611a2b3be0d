"""What :func:`anatomy.check` and :func:`anatomy.trace` return: a result that prints as the command line does.

    r = anatomy.check(MyAttention)
    r.ok, r.verdict, r.pitfalls        # False, "fail", ["no_scaling"]
    r.lines[0]["where"]                # "cell [3], line 12": the line the diagnosis points at
    print(r)                           # the text `anatomy check` prints; r.text("zh") in Chinese
    r.report                           # the doctor's full Report (None when the module could not be checked)

In Jupyter the result displays itself as HTML (``display.py``); in a terminal it is the command line's text.
``verdict`` is ``"pass"`` (no error; warnings may remain), ``"fail"`` (an error found) or ``"error"`` (the module
could not be loaded, built or called, or a step ran past ``timeout``; ``error`` then says which, as the command
line's one line does).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from anatomy.notebook import cells

if TYPE_CHECKING:
    from anatomy.doctor.report.findings import Report
    from anatomy.doctor.trace.learner_trace import LearnerTrace


def width() -> int:
    """The command line's width rule: the terminal's, between 60 and 100 columns (80 when it is not a terminal)."""
    return max(60, min(100, shutil.get_terminal_size((80, 24)).columns))


def _error_line(command: str, error: tuple[str, str, str], lang: str) -> str:
    return f"anatomy {command}: error: {error[2] if lang == 'zh' else error[1]}"


class _Printed:
    """What both results share: they print as the command line does, and their dict ends with the outcome."""

    def text(self) -> str:
        raise NotImplementedError

    def _with_outcome(self, base: dict[str, Any]) -> dict[str, Any]:
        me: Any = self  # a CheckResult or TraceResult: ok, verdict, pitfalls, lines, isolation, error
        return {
            **base,
            "ok": me.ok,
            "verdict": me.verdict,
            "pitfalls": me.pitfalls,
            "lines": me.lines,
            "isolation": me.isolation,
            "error": None if me.error is None else dict(zip(("kind", "en", "zh"), me.error)),
        }

    def __str__(self) -> str:
        return self.text()

    def __repr__(self) -> str:
        return self.text()


@dataclass(repr=False)  # prints as the command line does (_Printed)
class CheckResult(_Printed):
    target: str
    report: Report | None  # None when the module could not be checked
    error: tuple[str, str, str] | None = None  # (kind: check | timeout | exit | crash, en, zh)
    isolation: str = "process"  # "process": a forked child; "none": this process (no fork here)
    lang: str = "en"
    strict: bool = False

    @property
    def ok(self) -> bool:
        return self.report is not None and self.report.exit_code(strict=self.strict) == 0

    @property
    def verdict(self) -> str:
        if self.report is None:
            return "error"
        return "pass" if self.ok else "fail"

    @property
    def pitfalls(self) -> list[str]:
        """The bug-zoo names the doctor found (``anatomy.pitfalls``), sorted."""
        return [] if self.report is None else sorted(self.report.faults)

    @property
    def lines(self) -> list[dict[str, Any]]:
        """The learner's lines the findings point at, once each, in the report's order: ``where`` (``cell [3],
        line 12`` or ``my.py:12``), ``cell`` (None for a file), ``line``, ``source``, ``en``, ``zh``, ``probe``,
        ``fault``."""
        out, seen = [], set()
        for f in [] if self.report is None else self.report.findings:
            for w in f.where or []:
                key = (w.get("file"), w.get("line"))
                if key in seen:
                    continue
                seen.add(key)
                out.append(
                    {
                        **w,
                        "cell": w.get("cell", cells.cell_of(w.get("file") or "")),
                        "probe": f.probe,
                        "fault": f.fault or f.explained_by,
                    }
                )
        return out

    def text(self, lang: str | None = None, width_: int | None = None, details: bool = False) -> str:
        """What ``anatomy check`` prints: the short answer, or with ``details`` the full report (``--details``)."""
        from anatomy.doctor.report.short import short_answer

        lang = lang or self.lang
        if self.report is None:
            return _error_line("check", self.error or ("crash", "no report", "没有报告"), lang)
        if details:
            return self.report.render(lang=lang, width=width_ or width(), strict=self.strict)
        return "\n".join(short_answer(self.report, lang=lang, width=width_ or width(), strict=self.strict))

    def to_dict(self) -> dict[str, Any]:
        base = self.report.to_dict(strict=self.strict) if self.report is not None else {"target": self.target}
        return self._with_outcome(base)

    def _repr_html_(self) -> str:
        from anatomy.notebook.display import check_html

        return check_html(self)

    def _repr_markdown_(self) -> str:
        return "```text\n" + self.text() + "\n```"


@dataclass(repr=False)
class TraceResult(_Printed):
    target: str
    trace: LearnerTrace | None  # without its recording; None when the table could not be made
    cells: list[int | None] = field(default_factory=list)  # the cell of each row (None: a file)
    error: tuple[str, str, str] | None = None
    isolation: str = "process"
    lang: str = "en"

    @property
    def ok(self) -> bool:
        """The table was made and every step follows the post's flow (the command line's exit 0)."""
        return self.trace is not None and self.trace.deviation is None

    @property
    def verdict(self) -> str:
        if self.trace is None:
            return "error"
        return "pass" if self.ok else "fail"

    @property
    def pitfalls(self) -> list[str]:
        """What the first steps that leave the post's flow do (the deviations' kinds: scores, view, merge...)."""
        return [] if self.trace is None else list(dict.fromkeys(d.get("kind", "") for d in self.trace.deviations))

    @property
    def rows(self) -> list[dict[str, Any]]:
        """One dict per recorded step: ``line``, ``cell``, ``where``, ``source``, ``op``, ``kind``, ``dims``,
        ``shape``, ``deviation``."""
        if self.trace is None:
            return []
        out = []
        for i, row in enumerate(self.trace.rows):
            cell = self.cells[i] if i < len(self.cells) else None
            d = row.to_dict()
            d["cell"] = cell
            d["where"] = (
                f"cell [{cell}], line {row.line}"
                if cell is not None
                else f"{os.path.basename(self.trace.file)}:{row.line}"
            )
            out.append(d)
        return out

    @property
    def lines(self) -> list[dict[str, Any]]:
        """The steps that leave the post's flow, first the first: ``where``, ``cell``, ``line``, ``source``, ``en``
        (what was seen), ``expected``."""
        if self.trace is None:
            return []
        return [
            {
                "where": d.get("where") or f"{os.path.basename(d.get('file', ''))}:{d.get('line')}",
                "cell": d.get("cell"),
                "line": d.get("line"),
                "file": d.get("file"),
                "source": d.get("source"),
                "en": d.get("seen"),
                "zh": d.get("seen_zh"),
                "expected": d.get("expected"),
            }
            for d in self.trace.deviations
        ]

    def text(self, lang: str | None = None, fmt: str = "table") -> str:
        lang = lang or self.lang
        if self.trace is None:
            return _error_line("trace", self.error or ("crash", "no table", "没有表格"), lang)
        text = self.trace.render(fmt, lang=lang)
        for dev in self.trace.deviations:  # the table names the cell's file; say the cell
            if dev.get("cell") is not None:
                text = text.replace(f"{os.path.basename(dev['file'])}:{dev['line']}", dev["where"])
        where = self._cells_line(lang)
        return text + ("\n" + where if where else "")

    def _cells_line(self, lang: str) -> str:
        """``lines are in cell [3]`` (or, spread over cells, which lines are in which)."""
        if not any(c is not None for c in self.cells):
            return ""
        trace = self.trace
        assert trace is not None  # text() answered before without a table
        by: dict[int | None, list[int]] = {}
        for row, cell in zip(trace.rows, self.cells):
            by.setdefault(cell, []).append(row.line)
        if len(by) == 1:
            (cell,) = by
            return f"行号属于单元格 [{cell}]" if lang == "zh" else f"the line numbers are those of cell [{cell}]"
        parts = [
            f"{'cell' if lang != 'zh' else '单元格'} [{c}]: {', '.join(map(str, sorted(set(ls))))}"
            if c is not None
            else f"{os.path.basename(trace.file)}: {', '.join(map(str, sorted(set(ls))))}"
            for c, ls in by.items()
        ]
        return ("行号：" if lang == "zh" else "lines: ") + "; ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        base: dict[str, Any] = self.trace.to_dict() if self.trace is not None else {"target": self.target}
        if self.trace is not None:
            base["rows"] = self.rows
        return self._with_outcome(base)

    def _repr_html_(self) -> str:
        from anatomy.notebook.display import trace_html

        return trace_html(self)

    def _repr_markdown_(self) -> str:
        return self.text(fmt="markdown")


def report_html(report: Report, lang: str = "en") -> str:
    """A doctor's ``Report`` by itself (from ``anatomy.doctor.check``)."""
    from anatomy.notebook.display import check_html

    return check_html(CheckResult(report.target, report, lang=lang, isolation="process"))


def learner_trace_html(trace: LearnerTrace, lang: str = "en") -> str:
    """A ``LearnerTrace`` by itself (from ``anatomy.doctor.trace_learner``)."""
    from anatomy.notebook.display import trace_html

    return trace_html(TraceResult(trace.target, trace, cells.trace_cells(trace), lang=lang))
