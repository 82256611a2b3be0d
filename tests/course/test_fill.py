"""The post's -1e9 pitfall: found in the learner's source, tried in float16, and said in plain words; a finite fill
that float16 holds passes with a note; -inf and finfo.min pass silently."""

from __future__ import annotations

from pathlib import Path

import pytest

from anatomy.course.check import check
from anatomy.course.fill import FLOAT16_MAX, shown

LEARNERS = Path(__file__).parent / "learners"


@pytest.mark.parametrize(
    "name, exercise, words",
    [
        ("attention_fill_minus_1e9", "attention", "torch refuses the number"),  # masked_fill(-1e9) on float16 raises
        ("attention_where_minus_1e9_zh", "attention", "torch refuses the number"),  # full_like(-1e9) too
        ("attention_additive_minus_1e9", "attention", "silently becomes -inf"),  # the sum saturates to -inf
        ("mha_fill_minus_1e9", "mha", "torch refuses the number"),
    ],
)
def test_a_fill_float16_cannot_hold_is_named_with_what_it_does_there(name, exercise, words):
    r = check(exercise, LEARNERS / f"{name}.py")
    assert not r.passed and r.pitfall == "fill_minus_1e9"
    text = r.render("en")
    assert "the mask fill -1e9 is not a float16 number (float16 stops at -65504)" in text and words in text
    assert "建议直接用-inf" in text  # the post's own sentence
    assert "float16" in r.render("zh") and "原文" in r.render("zh")


def test_finite_fills_that_fit_and_the_dtypes_minimum_are_fine():
    assert check("attention", LEARNERS / "attention_ok_fill_minus_1e4.py").warnings
    assert check("attention", LEARNERS / "attention_ok_einsum_finfo.py").warnings == []
    assert FLOAT16_MAX == 65504.0 and shown(-1e9) == "-1e9" and shown(-12345.0) == "-12345"


@pytest.mark.parametrize(
    "code, value",
    [
        ("s = s.masked_fill(m, -2**32 + 1)\n", -(2.0**32) + 1),
        ("s = s.masked_fill(m, -1e9)\n", -1e9),
        ("s = torch.where(m, s, -9e15 * torch.ones_like(s))\n", -9e15),
        ("s = s.masked_fill(m, float('-1e9'))\n", -1e9),
        ("s = s - 1e9 * (1 - m)\n", -1e9),
        ("s = s.masked_fill(m, -10**9)\n", -1e9),
    ],
)
def test_a_fill_written_as_an_expression_of_numbers_is_found(tmp_path, code, value):
    from anatomy.course.fill import big_fill
    from anatomy.course.grader import Subject

    path = tmp_path / "fill.py"
    path.write_text("import torch\n\n\n" + code, encoding="utf-8")
    found = big_fill(Subject({}, str(path)))
    assert found is not None and found[0] == 4 and found[2] == value, found


def test_minus_inf_and_small_fills_are_not_dangerous(tmp_path):
    from anatomy.course.fill import big_fill
    from anatomy.course.grader import Subject

    path = tmp_path / "fill.py"
    path.write_text("a = float('-inf')\nb = -float('inf')\nc = -1e4\nd = 2 ** 32\n", encoding="utf-8")
    assert big_fill(Subject({}, str(path))) is None
