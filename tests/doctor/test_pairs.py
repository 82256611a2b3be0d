"""Two faults at once (``doctor/diagnosis/pairs.py``): the pairs ranked likeliest first, the budget, what the
report says when the search stopped there, and the nearest candidates exact although a pair's runs stop early."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from anatomy.doctor import check
from anatomy.doctor.diagnosis import diagnose, pairs
from anatomy.doctor.diagnosis.diagnose import attention_faults, block_faults
from anatomy.doctor.diagnosis.references import References
from anatomy.doctor.diagnosis.verdicts import Candidate
from anatomy.doctor.mapping.naming import Hypothesis

ZOO = Path(__file__).parent / "zoo"


def _singles(distances: dict[tuple[int, str], float]) -> list[Candidate]:
    """Candidates as a diagnosis holds them: each reference's correct run, then its single faults."""
    out = []
    for ref in sorted({r for r, _ in distances}):
        out.append(Candidate(ref, (), (), 1.0))
        out += [Candidate(r, (), (f,), d) for (r, f), d in distances.items() if r == ref]
    return out


def test_pairs_are_ranked_by_how_near_each_fault_alone_comes_and_ties_keep_the_search_order():
    names = ["a", "b", "c", "d"]
    cands = _singles({(0, "a"): 0.5, (0, "b"): 0.1, (0, "c"): 0.2, (1, "a"): 0.05, (1, "d"): float("nan")})
    ranked = [(i, a, b, round(score, 6)) for score, _, i, _, a, b in pairs.likeliest_pairs(cands, names)]
    assert ranked[:4] == [(0, "b", "c", 0.3), (0, "a", "b", 0.6), (0, "a", "c", 0.7), (1, "a", "d", float("inf"))]
    assert len(ranked) == 4  # a pair only of faults that ran alone on that reference
    tied = _singles({(0, "c"): 0.1, (0, "a"): 0.1, (0, "b"): 0.1})
    assert [(a, b) for *_, a, b in pairs.likeliest_pairs(tied, names)] == [("a", "b"), ("a", "c"), ("b", "c")]


def _block() -> torch.nn.Module:
    from anatomy.components import EncoderBlock

    torch.manual_seed(0)
    return EncoderBlock.build(d_model=16, n_heads=4, d_ff=32, activation="gelu", kernel="math").double().eval()


@pytest.mark.parametrize("budget", [7, None])
def test_the_search_runs_the_likeliest_compatible_pairs_up_to_its_budget_and_counts_what_it_left(budget):
    ref = _block()
    names = attention_faults() + block_faults()
    distances = {(0, n): float(k % 5) for k, n in enumerate(names)}  # spread ranks, many ties
    cands = _singles(distances)

    def run(i, v, faults, module):
        assert type(module) is type(ref)  # the reference (or the second core's copy of it)
        return Candidate(i, v, faults, 1.0)

    found, search = pairs.try_pairs(cands, names, lambda i, v: ref, run, budget=budget or 10**9)
    every = pairs.compatible_pairs(ref, names)
    ran = [c.faults for c in found]
    ranked = [(a, b) for *_, a, b in pairs.likeliest_pairs(cands, names)]
    if budget is None:  # every compatible pair, as the exhaustive search ran them
        assert sorted(ran) == sorted(every) and search.untried == 0 and search.to_dict()["every_pair"]
    else:
        likeliest = [p for p in ranked if p in every][:budget]  # the likeliest compatible ones
        assert sorted(ran) == sorted(likeliest)
        examined = ranked.index(likeliest[-1]) + 1
        assert search.tried == budget and search.untried == len(ranked) - examined > 0
        assert search.to_dict() == {"tried": budget, "untried": search.untried, "every_pair": False}
    assert [c.faults for c in found] == [p for p in every if p in ran]  # in the exhaustive search's order


def test_a_pair_found_within_the_budget_is_named_with_what_was_left_untried(monkeypatch):
    monkeypatch.setattr(pairs, "PAIR_BUDGET", 10)
    report = check(str(ZOO / "two_faults.py:NoScalingMaskAfterSoftmax"))
    d = report.diagnosis
    assert d["status"] == "fault" and d["faults"] == ["no_scaling", "mask_after_softmax"]
    assert d["pairs"]["tried"] == 10 and d["pairs"]["untried"] > 0 and not d["pairs"]["every_pair"]
    finding = next(f for f in report.findings if f.probe == "diagnosis")
    assert "the 10 likeliest pairs were tried and" in finding.en and "another pair may reproduce it too" in finding.en
    assert "试了最可能的 10 个组合" in finding.zh


def test_every_pair_run_says_nothing_about_a_budget():
    d = check(str(ZOO / "two_faults.py:NoScalingMaskAfterSoftmax")).diagnosis
    assert d["pairs"] == {"tried": 84, "untried": 0, "every_pair": True}


def test_nothing_reproduces_it_says_how_many_pairs_were_tried_when_the_search_stopped(monkeypatch):
    monkeypatch.setattr(pairs, "PAIR_BUDGET", 3)
    report = check(str(ZOO / "learner_attention_slips.py:SigmoidWeights"))
    d = report.diagnosis
    assert d["status"] == "unexplained" and d["pairs"]["tried"] == 3 and d["pairs"]["untried"] > 0
    [warning] = report.warnings
    left = f"{d['pairs']['untried']:,}"
    assert f"nor any of the 3 likeliest pairs of them ({left} pairs left untried) reproduces it" in warning.en
    assert f"最可能的 3 个两错误组合（另有 {left} 个组合未试）" in warning.zh
    assert f"nor any of the 3 likeliest pairs ({left} untried)" in report.render(width=300)


def test_the_nearest_candidates_are_exact_although_a_pairs_runs_stopped_early():
    """A pair's candidate holds a lower bound when its runs stopped at the first past the tolerance; the report's
    three nearest are what they would be had every pair run whole."""
    true = {("x", "y"): 0.3, ("x", "z"): 5.0, ("y", "z"): 0.2, ("y", "w"): 0.25}
    cands = [Candidate(0, (), (), 1.0), Candidate(0, (), ("x",), 0.4), Candidate(0, (), ("y",), 0.6)]
    bounds = {("x", "y"): 0.1, ("x", "z"): 0.45, ("y", "z"): 0.1, ("y", "w"): 0.1}  # below every exact distance
    cands += [Candidate(0, (), p, bounds[p], complete=False) for p in true]

    def completed(c: Candidate) -> None:
        c.distance, c.complete = true[(c.faults[0], c.faults[1])], True

    refs = References.__new__(References)
    refs.kind = "attention"
    nearest = diagnose._nearest(cands, refs, [Hypothesis("test", {})], completed)
    assert [n["faults"] for n in nearest] == [["y", "z"], ["y", "w"], ["x", "y"]]
    assert [n["max_abs_diff"] for n in nearest] == [0.2, 0.25, 0.3]
    assert not next(c for c in cands if c.faults == ("x", "z")).complete  # its bound past the three: never run whole
