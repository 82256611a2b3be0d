"""The short answer (anatomy/doctor/report/short.py): verdict, pitfall, line, the post's sentence and one hint in at
most 8 lines; warnings on a pass; no internal words; all Chinese with lang="zh"; the CLI prints it unless
--details. Nothing here depends on the terminal's width (the words are compared after joining the lines)."""

from __future__ import annotations

from pathlib import Path

import pytest

from anatomy.doctor import check
from anatomy.doctor.report.short import MAX_LINES, short_answer
from anatomy.pitfalls import FAULTS

ZOO = Path(__file__).parent / "zoo"
JARGON = ("bug-zoo", "bug zoo", "--causal", "{'", '{"', "fault", "probe")


def words(lines: list[str]) -> str:
    return " ".join(" ".join(lines).split())


def letters(lines: list[str]) -> str:
    return "".join("".join(lines).split())


def test_a_fault_gets_verdict_title_line_post_and_hint_in_at_most_8_lines():
    report = check(str(ZOO / "separate_attention.py:ScaleByDModel"))
    lines = short_answer(report, width=1000)
    assert len(lines) <= MAX_LINES and lines[0].startswith("✗ NOT YET: scaled by sqrt(d_model)")
    text = words(lines)
    assert "line 85 of separate_attention.py" in text and FAULTS["scale_by_d_model"].post_zh in text
    assert "hint: Scores are divided by sqrt(d_model)" in text and "--details" in text
    assert not any(j in text for j in JARGON), text


def test_a_pass_shows_its_warnings():
    lines = short_answer(check(str(ZOO / "torch_adapter.py:TorchMHA")), width=1000)
    assert lines[0].startswith("✓ PASS") and any("warning: NaN on fully-masked rows" in ln for ln in lines)


@pytest.mark.parametrize(
    "target",
    [
        "separate_attention.py:ScaleByDModel",
        "torch_adapter.py:TorchMHA",
        "fused_block.py:SharedLayerNorm",
        "separate_attention.py:MultiHeadAttention",
    ],
)
def test_chinese_short_answer_has_no_english_words_of_ours(target):
    lines = short_answer(check(str(ZOO / target)), lang="zh", width=1000)
    text = words(lines)
    assert len(lines) <= MAX_LINES
    assert not any(
        w in text for w in ("NOT YET", "PASS", "where", "hint", "the post", "warning", "exit ", "also", "error")
    )
    assert lines[0].startswith(("✗ 还不对", "✓ 通过"))


def test_narrow_terminal_wraps_the_same_words():
    report = check(str(ZOO / "fused_block.py:SharedLayerNorm"))
    assert letters(short_answer(report, width=60)) == letters(short_answer(report, width=1000))


def test_cli_prints_the_short_answer_and_the_full_report_behind_details(capsys):
    from anatomy.cli.main import main

    target = str(ZOO / "separate_attention.py:ScaleByDModel")
    assert main(["check", target]) == 1
    short = capsys.readouterr().out
    assert short.startswith("✗ NOT YET") and "passed" not in short
    assert main(["check", target, "--details"]) == 1
    full = capsys.readouterr().out
    assert full.startswith("anatomy check · ") and "passed" in full and "scale_by_d_model" in full
