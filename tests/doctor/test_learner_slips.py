"""The doctor on the learners' attention slips of issue 29 (tests/doctor/zoo/learner_attention_slips.py): each slip
is named, with the line marked ``# <-- NAME`` in the file; the correct modules beside them pass."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from anatomy.doctor import check
from anatomy.doctor.report.short import short_answer

ZOO = Path(__file__).parent / "zoo"
FILE = ZOO / "learner_attention_slips.py"


def marked() -> dict[str, tuple[str, int]]:
    """class -> (the pitfall its ``# <-- NAME`` names, that line)."""
    out, cls = {}, None
    for number, line in enumerate(FILE.read_text(encoding="utf-8").splitlines(), start=1):
        found = re.match(r"class (\w+)", line)
        cls = found.group(1) if found else cls
        mark = re.search(r"# <-- ([a-z_]+)", line)
        if mark and cls:
            out[cls] = (mark.group(1), number)
    return out


SLIPS = marked()
ERRORS = {c: v for c, v in SLIPS.items() if v[0] not in ("finite_mask_fill", "heads_interleaved")}
WARNINGS = {c: v for c, v in SLIPS.items() if c not in ERRORS}


def lines(report) -> set[int]:
    return {w["line"] for f in report.findings for w in f.where if w.get("line") and w.get("file") == str(FILE)}


@pytest.mark.parametrize("cls", sorted(ERRORS))
def test_each_slip_is_named_with_its_line(cls):
    fault, line = ERRORS[cls]
    report = check(f"{FILE}:{cls}")
    assert fault in report.faults and report.exit_code() == 1, report.render()
    assert line in lines(report), (line, sorted(lines(report)), report.render())
    assert len(report.faults - {fault, "inf_fill_no_guard", "no_scaling"}) == 0, report.faults


@pytest.mark.parametrize("cls", sorted(WARNINGS))
def test_layout_and_fill_slips_are_warnings_that_name_themselves(cls):
    fault, line = WARNINGS[cls]
    report = check(f"{FILE}:{cls}")
    assert fault in report.faults and report.errors == [] and report.exit_code() == 0, report.render()
    assert report.exit_code(strict=True) == 1
    if fault == "finite_mask_fill":
        assert line in lines(report), report.render()


@pytest.mark.parametrize("cls", ["Plain", "ModuleDropout", "GuardedFunctionalDropout"])
def test_the_correct_modules_beside_them_match(cls):
    report = check(f"{FILE}:{cls}")
    assert report.errors == [] and report.diagnosis["status"] == "matches", report.render()
    assert report.faults <= {"inf_fill_no_guard"}


def test_the_scale_after_the_softmax_is_not_called_a_missing_scale():
    report = check(f"{FILE}:ScaleAfterSoftmax")
    assert report.faults == {"scale_after_softmax", "inf_fill_no_guard"}, report.render()
    assert short_answer(report)[0] == "✗ NOT YET: scale applied after the softmax"


def test_dropout_left_on_is_said_so_and_its_symptoms_are_grouped_under_it():
    report = check(f"{FILE}:FunctionalDropout")
    assert report.diagnosis["status"] == "fault" and report.diagnosis["fault"] == "dropout_at_eval"
    assert all(f.explained_by == "dropout_at_eval" for f in report.errors if f.fault is None)
    assert report.counts() == (1, 0), report.render()
    assert "not compared" in report.render() and "未比较" in report.render("zh")


def test_the_zoos_softmax_over_the_queries_is_now_named():
    report = check(f"{ZOO / 'other_styles.py'}:SoftmaxOverQueries")
    assert report.diagnosis["faults"] == ["softmax_wrong_axis"] and report.exit_code() == 1, report.render()
