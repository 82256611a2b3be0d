"""The shared rule helpers of ``anatomy.experiments.rules``: per-seed outcomes to a verdict, in both languages."""

from __future__ import annotations

import pytest

from anatomy.experiments.rules import all_or_none, seeds_disagree


def test_seeds_disagree_is_inconclusive_with_the_standard_sentence():
    v = seeds_disagree("x = 1.", "x 为 1。")
    assert (v.verdict, v.reason_en, v.reason_zh) == (
        "inconclusive",
        "x = 1. The seeds disagree.",
        "x 为 1。各种子结论不一致。",
    )


@pytest.mark.parametrize(
    "holds, verdict, en, zh",
    [
        ([True, True, True], "supported", "x = 1.", "x 为 1。"),
        ([False, False, False], "refuted", "x = 1. Not so.", "x 为 1。并非如此。"),
        ([True, False, True], "inconclusive", "x = 1. The seeds disagree.", "x 为 1。各种子结论不一致。"),
        ([True], "supported", "x = 1.", "x 为 1。"),
        ([False], "refuted", "x = 1. Not so.", "x 为 1。并非如此。"),
    ],
)
def test_all_or_none_gives_each_outcome(holds, verdict, en, zh):
    v = all_or_none(holds, "x = 1.", "x 为 1。", refute_en=" Not so.", refute_zh="并非如此。")
    assert (v.verdict, v.reason_en, v.reason_zh) == (verdict, en, zh)


def test_all_or_none_refutes_with_the_bare_numbers_by_default():
    v = all_or_none([False, False], "x = 1.", "x 为 1。")
    assert (v.verdict, v.reason_en, v.reason_zh) == ("refuted", "x = 1.", "x 为 1。")


def _ms(**values):
    from anatomy.experiments.registry import Metric

    return {k: Metric(k, list(v)) for k, v in values.items()}


def test_decide_takes_the_first_case_that_holds_and_appends_its_words():
    from anatomy.experiments.rules import decide

    v = decide(
        "x = 1.",
        "x 为 1。",
        ("supported", False, " A.", "甲。"),
        ("nuanced", True, " B.", "乙。"),
        ("refuted", True, " C.", "丙。"),
    )
    assert (v.verdict, v.reason_en, v.reason_zh) == ("nuanced", "x = 1. B.", "x 为 1。乙。")


def test_decide_without_a_holding_case_says_the_seeds_disagree():
    from anatomy.experiments.rules import decide

    v = decide("x = 1.", "x 为 1。", ("supported", False, "", ""), ("refuted", False, " C.", "丙。"))
    assert (v.verdict, v.reason_en, v.reason_zh) == (
        "inconclusive",
        "x = 1. The seeds disagree.",
        "x 为 1。各种子结论不一致。",
    )


def test_differences_setting_and_fmts_read_metrics_seed_by_seed():
    from anatomy.experiments.rules import differences, fmts, setting

    ms = _ms(a=[3.0, 5.5], b=[1.0, 0.5], depth=[6.0, 6.0])
    assert differences(ms, "a", "b") == [2.0, 5.0]
    assert setting(ms, "depth") == 6 and isinstance(setting(ms, "depth"), int)
    assert fmts(ms, "b", "depth") == {"b": "0.75 ± 0.354", "depth": "6 ± 0"}
