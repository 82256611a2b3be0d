"""The shared rule helpers of ``anatomy.experiments.rules``: per-seed outcomes to a verdict, in both languages."""

from __future__ import annotations

import pytest

from anatomy.experiments.rules import all_or_none, seeds_disagree


def test_seeds_disagree_is_inconclusive_with_the_standard_sentence():
    v = seeds_disagree("x = 1.", "x 为 1。")
    assert (v.verdict, v.reason_en, v.reason_zh) == ("inconclusive", "x = 1. The seeds disagree.",
                                                     "x 为 1。各种子结论不一致。")


@pytest.mark.parametrize("holds, verdict, en, zh", [
    ([True, True, True], "supported", "x = 1.", "x 为 1。"),
    ([False, False, False], "refuted", "x = 1. Not so.", "x 为 1。并非如此。"),
    ([True, False, True], "inconclusive", "x = 1. The seeds disagree.", "x 为 1。各种子结论不一致。"),
    ([True], "supported", "x = 1.", "x 为 1。"),
    ([False], "refuted", "x = 1. Not so.", "x 为 1。并非如此。"),
])
def test_all_or_none_gives_each_outcome(holds, verdict, en, zh):
    v = all_or_none(holds, "x = 1.", "x 为 1。", refute_en=" Not so.", refute_zh="并非如此。")
    assert (v.verdict, v.reason_en, v.reason_zh) == (verdict, en, zh)


def test_all_or_none_refutes_with_the_bare_numbers_by_default():
    v = all_or_none([False, False], "x = 1.", "x 为 1。")
    assert (v.verdict, v.reason_en, v.reason_zh) == ("refuted", "x = 1.", "x 为 1。")
