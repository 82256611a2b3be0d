"""Every learner attempt under ``learners/`` graded and asserted: a correct solution (in its own style) passes; a
mistake is NOT YET with the pitfall named in its file (``# <-- pitfall NAME`` on the line it must point at); code
that cannot run (``# <-- error``) gets one clear message carrying its line.

Re-run the score by hand: ``PYTHONPATH=$PWD python tests/course/test_learners.py`` (``-v``: each miss; file names
after it: only those attempts, e.g. the ones added since a commit:
``python tests/course/test_learners.py $(git diff --name-only --diff-filter=A REV -- tests/course/learners)``).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

LEARNERS = Path(__file__).parent / "learners"
EXERCISE_OF = re.compile(r"^(attention|heads|masks|sinusoidal|layernorm|add_norm|mha|block|gpt)_")


def expected(path: Path) -> tuple[str, str | None, int | None]:
    """``("pass", None, None)``, ``("not yet", pitfall, line)`` or ``("error", None, line)``."""
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        found = re.search(r"<-- pitfall ([a-z_0-9]+)", line)
        if found:
            return "not yet", found.group(1), number
        if "<-- error" in line:
            return "error", None, number
    return "pass", None, None


STEPS = {"gpt": {"steps": 8}}  # gpt trains beside the reference from the same weights: 8 steps show a gap
CASES = sorted(p for p in LEARNERS.glob("*.py") if EXERCISE_OF.match(p.name))


def grade(path: Path) -> dict:
    """What the course says of one attempt, as plain values."""
    from anatomy.course.check import LearnError, check

    exercise = EXERCISE_OF.match(path.name).group(1)  # type: ignore[union-attr]
    try:
        result = check(exercise, path, **STEPS.get(exercise, {}))
    except LearnError as err:
        return {"verdict": "error", "pitfall": None, "line": None, "text": err.en, "zh": err.zh}
    return {
        "verdict": "pass" if result.passed else "not yet",
        "pitfall": result.pitfall,
        "line": result.line,
        "text": result.render("en"),
        "zh": result.render("zh"),
    }


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_each_learner_attempt_gets_its_verdict_pitfall_and_line(path):
    verdict, pitfall, line = expected(path)
    got = grade(path)
    assert got["verdict"] == verdict, got["text"]
    assert len(got["text"].splitlines()) <= 8 and len(got["zh"].splitlines()) <= 8, got["text"]  # the short answer
    if verdict == "not yet":
        assert got["pitfall"] == pitfall and got["line"] == line, got["text"]
        assert f"line {line}" in got["text"] and f"第 {line} 行" in got["zh"], got["text"]
        assert "还没通过" in got["zh"] and pitfall in got["zh"]
    if verdict == "error":
        assert f"line {line}" in got["text"] and "\n" not in got["text"], got["text"]


def score(only: list[str] | None = None) -> dict[str, int]:
    counts = {
        "attempts": 0,
        "correct": 0,
        "correct_passing": 0,
        "mistakes": 0,
        "mistakes_named": 0,
        "lines_right": 0,
        "silent_passes": 0,
        "errors": 0,
        "errors_clear": 0,
    }
    names = {Path(n).name for n in only or []}
    for path in CASES:
        if names and path.name not in names:
            continue
        verdict, pitfall, line = expected(path)
        try:
            got = grade(path)
        except Exception as err:  # noqa: BLE001 - the score counts a crash of the grader as a miss
            got = {"verdict": "crash", "pitfall": None, "line": None, "text": repr(err)}
        counts["attempts"] += 1
        if verdict == "pass":
            counts["correct"] += 1
            counts["correct_passing"] += got["verdict"] == "pass"
        elif verdict == "not yet":
            counts["mistakes"] += 1
            counts["mistakes_named"] += got["verdict"] == "not yet" and got["pitfall"] == pitfall
            counts["lines_right"] += got["verdict"] == "not yet" and got["line"] == line
            counts["silent_passes"] += got["verdict"] == "pass"
        else:
            counts["errors"] += 1
            counts["errors_clear"] += got["verdict"] == "error" and f"line {line}" in got["text"]
        if "-v" in sys.argv and (got["verdict"], got["pitfall"], got["line"]) != (verdict, pitfall, line):
            print(
                f"{path.name}: want {verdict} {pitfall} {line}; got {got['verdict']} {got['pitfall']} {got['line']}",
                file=sys.stderr,
            )
    return counts


if __name__ == "__main__":
    print(score([a for a in sys.argv[1:] if a.endswith(".py")]))
