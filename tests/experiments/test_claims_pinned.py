"""The claims' verdicts stay what they were when the rules moved to declared thresholds (rules.Ladder), and the
rule texts and reasons come from the same constants as the decisions."""

from __future__ import annotations

import pytest
import torch

from anatomy.experiments.claims import head_count_claims, norm_depth, norm_depth_claims, placement_claims
from anatomy.experiments.registry import CLAIMS, Metric
from anatomy.experiments.rules import TOL, Case, Ladder, seed_verdict
from anatomy.experiments.runner import run_claims

# Smoke preset, seed 0, one thread: the verdicts before the claims lab was reorganised (issue 11, item 7). The
# experiments here take a few seconds together; the slow ones (head-count, init-training, ffn-width) are left out.
PINNED = {
    "C4-multihead-parameters": "supported",
    "C5-dot-variance": "supported",
    "C6-scaling-restores-unit-variance": "supported",
    "C9-shape-flow": "supported",
    "C10-wrong-transpose-silent": "supported",
    "C17-padding-large-negative": "nuanced",
    "C18-zeroing-after-softmax": "nuanced",
    "C19-causal-mask": "supported",
    "C20-mask-fill": "refuted",
    "C23-linear-separation": "nuanced",
    "C24-sinusoidal-formula": "supported",
    "C25-frequency-by-dimension": "supported",
    "C26-second-hand-hour-hand": "refuted",
    "C28-orthogonal-fourier-basis": "nuanced",
    "C32-rope-mainstream": "supported",
    "C33-six-layers-without-addnorm": "nuanced",
    "C34-residual-degradation-not-vanishing": "supported",
    "C36-post-norm-gradient-highway": "refuted",
    "C37-any-depth-trainable": "supported",
    "C39-layernorm-stabilises-scores": "supported",
    "C40-layernorm-formula": "supported",
    "C41-original-layernorm-mean-order": "inconclusive",
    "C42-paper-is-post-norm": "supported",
    "C43-post-norm-unstable-accumulation": "refuted",
    "C44-pre-norm-smoother": "nuanced",
    "C45-pre-norm-de-facto": "nuanced",
    "C46-block-shape-table": "supported",
    "C49-pe-on-padding-harmless": "supported",
    "C53-ffn-most-parameters": "supported",
    "C55-explosion-debug-order": "nuanced",
}


@pytest.fixture
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_smoke_verdicts_of_the_cheap_claims_are_pinned(tmp_path, one_thread):
    doc = run_claims(list(PINNED), preset="smoke", out=tmp_path, progress=False)
    got = {c["id"]: c["verdict"] for c in doc["claims"]}
    assert got == PINNED
    for c in doc["claims"]:  # a rule reads only the metrics its claim declares (and reports): same verdict from them
        declared = {k: Metric(k, [float(v) for v in m["values"]], m["unit"]) for k, m in c["metrics"].items()}
        assert CLAIMS[c["id"]].rule(declared).verdict == c["verdict"], c["id"]
    c45 = next(c for c in doc["claims"] if c["id"] == "C45-pre-norm-de-facto")
    assert "spread over the learning rates was larger than Post-Norm's by > 0.05 nats" in c45["reason_en"]


def _ms(**values) -> dict[str, Metric]:
    return {k: Metric(k, list(v) if isinstance(v, tuple) else [v]) for k, v in values.items()}


@pytest.mark.parametrize(
    "failed, spread, verdict, named",
    [
        ((0, 2), (0.1, 0.1), "supported", None),
        ((0, 0), (0.4, 0.1), "nuanced", "spread over the learning rates was larger"),
        ((2, 0), (0.1, 0.1), "nuanced", "failed at more learning rates than Post-Norm (2 vs 0)"),
        ((2, 0), (0.1 + TOL + 0.01, 0.1), "nuanced", "failed at more learning rates than Post-Norm (2 vs 0) and its"),
        ((0, 0), (0.1 + TOL - 0.01, 0.1), "supported", None),
    ],
)
def test_c45_names_the_condition_that_decided(failed, spread, verdict, named):
    v = CLAIMS["C45-pre-norm-de-facto"].rule(
        _ms(failed_pre=failed[0], failed_post=failed[1], lr_spread_pre=spread[0], lr_spread_post=spread[1])
    )
    assert v.verdict == verdict
    if named:
        assert named in v.reason_en and "不比 Post-Norm 更稳健" in v.reason_zh
    assert f"{TOL}" in CLAIMS["C45-pre-norm-de-facto"].rule_text


def test_c45_counts_the_seeds_where_a_condition_failed():
    v = CLAIMS["C45-pre-norm-de-facto"].rule(
        _ms(failed_pre=(0, 3, 0), failed_post=(1, 1, 1), lr_spread_pre=(0.1, 0.1, 0.1), lr_spread_post=(0.2, 0.2, 0.2))
    )
    assert v.verdict == "nuanced" and "than Post-Norm on 1 of 3 seeds" in v.reason_en and "1/3 个种子" in v.reason_zh


def test_c1_threshold_is_one_constant_for_rule_reason_and_decision():
    rule, diffuse = CLAIMS["C1-single-head-diffuse"], head_count_claims.DIFFUSE
    assert f"≥ {diffuse}" in rule.rule_text and "nuanced if the single head is almost uniform" in rule.rule_text

    def verdict(lm, pair):
        return rule.rule(
            _ms(
                ent_lm_h1=lm,
                ent_pair_h1=pair,
                ent_lm_h4_mean=0.5,
                ent_lm_h4_min=0.4,
                ent_pair_h4_mean=0.5,
                ent_lm_init=0.9,
            )
        )

    assert verdict(diffuse, diffuse).verdict == "supported"
    below = verdict(diffuse - 1e-9, diffuse)
    assert (
        below.verdict == "nuanced"
        and f"Decided: the single head is almost uniform (entropy ≥ {diffuse}) on one task only (nuanced)."
        in below.reason_en
    )
    assert "判定：单头只在一个任务上几乎均匀" in below.reason_zh
    assert verdict(0.1, 0.1).verdict == "refuted"


def test_rule_texts_of_the_norm_depth_grid_quote_its_constants():
    texts = {k: c.rule_text for k, c in CLAIMS.items()}
    assert f"rise of > {norm_depth.OSCILLATION} nats" in texts["C33-six-layers-without-addnorm"]
    assert f"< {norm_depth_claims.VANISHED}×" in texts["C34-residual-degradation-not-vanishing"]
    assert "within [0.5, 2]" in texts["C36-post-norm-gradient-highway"]
    assert f"> {placement_claims.ACCUMULATES}×" in texts["C43-post-norm-unstable-accumulation"]


def test_ladder_first_case_decides_and_seed_verdict_names_every_deciding_case():
    ladder = Ladder(
        (
            Case("supported", "x ≥ 1", "x ≥ 1", lambda x: x >= 1),
            Case("supported", "x is negative", "x 为负", lambda x: x < 0),
            Case("refuted", "x ≥ 0.5", "x ≥ 0.5", lambda x: x >= 0.5),
        )
    )
    assert [ladder(x) for x in (2, -1, 0.7, 0.2)] == ["supported", "supported", "refuted", "inconclusive"]
    assert ladder.text("Lead.") == (
        "Lead. Per seed: supported if x ≥ 1; supported if x is negative; refuted if "
        "x ≥ 0.5; otherwise inconclusive. Inconclusive if the seeds disagree."
    )
    v = seed_verdict(_ms(x=(2.0, -1.0)), ("x",), ladder, "x.", "x。")
    assert v.verdict == "supported"
    assert v.reason_en == "x. Decided: x ≥ 1 (supported). Decided: x is negative (supported)."
    assert seed_verdict(_ms(x=(2.0, 0.7)), ("x",), ladder, "x.", "x。").verdict == "inconclusive"


def test_thresholds_print_as_the_rule_texts_write_them():
    from anatomy.experiments.rules import num

    assert [num(x) for x in (1e-9, 1e-3, 1e-4, 2.5e-4, 0.05, 1.5, 2, 0.9)] == [
        "1e-9",
        "1e-3",
        "1e-4",
        "2.5e-4",
        "0.05",
        "1.5",
        "2",
        "0.9",
    ]
