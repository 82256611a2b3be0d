"""Each exercise: the reference passes; learners' code in their own styles passes when right, and when wrong is
told the pitfall's name and the line (marked ``# <-- pitfall NAME`` in the file); what cannot run gets one message."""

from __future__ import annotations

import pytest

from anatomy.course import EXERCISES, solution_path
from anatomy.course.check import LearnError, check


@pytest.mark.parametrize("exercise", [e.id for e in EXERCISES if e.id != "tiny_lm"])
def test_the_reference_solution_passes(exercise):
    options = {"steps": 8} if exercise == "gpt" else {}  # gpt's full training: tests/course/test_gpt.py
    result = check(exercise, solution_path(next(e for e in EXERCISES if e.id == exercise)), **options)
    assert result.passed, result.render()
    assert result.pitfall is None


BROKEN = {
    "syntax": ("def attention(q, k, v, mask=None):\n    return q @ k.transpose(-2, -1\n", "line 2: syntax error"),
    "signature": (
        "def attention(q, k):\n    return q, k\n",
        "attention(q, k): the exercise calls it as attention(q, k, v, mask)",
    ),
    "raises": ("def attention(q, k, v, mask=None):\n    return q.view(3, -1, 7)\n", "raised RuntimeError"),
    "exits": ("import sys\n\ndef attention(q, k, v, mask=None):\n    sys.exit(0)\n", "SystemExit"),
    "missing": ("def attn(q, k, v, mask=None):\n    return q, q\n", "defines no attention"),
    "hangs": ("def attention(q, k, v, mask=None):\n    while True:\n        pass\n", "time limit"),
}


@pytest.mark.parametrize("kind", BROKEN)
def test_code_that_cannot_be_graded_gets_one_clear_message(kind, tmp_path):
    source, words = BROKEN[kind]
    path = tmp_path / "mine.py"
    path.write_text(source, encoding="utf-8")
    with pytest.raises(LearnError) as err:
        check("attention", path, timeout=1.0)
    assert words in err.value.en and "\n" not in err.value.en and "Traceback" not in err.value.en
    assert err.value.zh and err.value.zh != ""
    if kind == "raises":
        assert "line 2" in err.value.en  # the learner's own line


def test_a_file_of_another_exercise_is_named(tmp_path):
    from anatomy.course import get, skeleton

    path = tmp_path / "01_attention.py"
    path.write_text(skeleton(get("attention")), encoding="utf-8")
    with pytest.raises(LearnError, match="is the file of exercise 'attention'.*anatomy learn check attention"):
        check("heads", path)
