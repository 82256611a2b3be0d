"""docs/architecture.md, "Adding a pitfall", as a test: the record it shows is the catalogue's, the fault it shows is
faults.py's, and the learner's module it shows gets the report it shows."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from anatomy.course import doctor_exercises
from anatomy.doctor import check
from anatomy.doctor.diagnosis import diagnose
from anatomy.doctor.report.short import short_answer
from anatomy.pitfalls import catalog_attention, faults, records
from anatomy.pitfalls.records import Pitfall

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"


def block(name: str) -> str:
    """The code block marked ``<!-- walkthrough: NAME -->`` in the section."""
    text = DOC.read_text(encoding="utf-8")
    section = text[text.index("## Adding a pitfall") :]
    found = re.search(rf"<!-- walkthrough: {name} -->\n```\w*\n(.*?)```", section, re.S)
    assert found, f"no walkthrough block {name!r} in {DOC}"
    return found.group(1)


def test_the_record_shown_is_the_catalogues():
    scope = {"Pitfall": Pitfall, "attention_fault": catalog_attention.attention_fault}
    exec(block("record"), scope)
    shown, real = scope["pitfall"], records.get("softmax_wrong_axis")
    assert real is not None
    for f in dataclasses.fields(Pitfall):
        if f.name != "apply":
            assert getattr(shown, f.name) == getattr(real, f.name), f.name
    assert shown.apply.keywords == real.apply.keywords == {"name": "softmax_wrong_axis"}


def test_the_fault_shown_is_faults_py():
    def squash(s: str) -> str:
        return re.sub(r"\s+", "", s)

    assert squash(block("fault")) in squash(Path(faults.__file__).read_text(encoding="utf-8"))
    assert "softmax_wrong_axis" in faults.WRAPPERS


def test_the_learner_shown_gets_the_report_shown(tmp_path):
    file = tmp_path / "attention.py"
    file.write_text(block("learner"), encoding="utf-8")
    assert "softmax_wrong_axis" in diagnose.attention_faults()
    report = check(f"{file}:Attention")
    assert "softmax_wrong_axis" in report.faults and report.exit_code() == 1, report.render()
    shown = [line.rstrip() for line in block("report").splitlines() if line.strip()]
    said = short_answer(report, width=200)
    for line in shown:
        assert line in said, (line, said)
    assert records.hint("softmax_wrong_axis") == (
        "softmax over the last axis, the keys: torch.softmax(scores, dim=-1)",
        "沿最后一维（键）做 softmax：torch.softmax(scores, dim=-1)",
    )
    assert doctor_exercises.records is records
