"""The function exercises' grader (attention, heads, masks, sinusoidal): a named pitfall carries the post's sentence,
numbers and a hint; a broken contract (what the function returns) is named before any comparison."""

from __future__ import annotations

from pathlib import Path

from anatomy.course.check import check

LEARNERS = Path(__file__).parent / "learners"


def test_a_named_pitfall_quotes_the_post_and_gives_numbers_and_a_hint():
    result = check("attention", LEARNERS / "attention_no_scaling.py")
    text = result.render("en", details=True)
    assert "除以sqrt(d_k)的本质" in text  # the post's own sentence
    assert "differs from the reference by up to" in text and "average largest weight per row" in text
    assert "hint: divide q @ k.transpose(-2, -1) by math.sqrt(q.size(-1))" in text
    assert result.table and result.table[1]["dims"] == "(B, H, T, S)"  # the learner's own shape table


def test_an_unfilled_skeleton_says_what_it_returned(tmp_path):
    from anatomy.course import get, skeleton

    path = tmp_path / "01_attention.py"
    path.write_text(skeleton(get("attention")), encoding="utf-8")
    result = check("attention", path)
    assert not result.passed and result.pitfall == "wrong_return" and "NoneType" in result.render()
