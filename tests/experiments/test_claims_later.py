"""Claims C21–C55 (§3 positional encoding, §4 Add & Norm, §5 the block): every rule on synthetic metric values, for
the outcomes it can give, and one smoke run of the experiments that asserts each claim recorded its metrics."""

from __future__ import annotations

import json
import math

import pytest

from anatomy.experiments.fitting import curve_stats
from anatomy.experiments.registry import CLAIMS, Metric
from anatomy.experiments.runner import run_claims, select
from anatomy.experiments.tasks import MarkovTask

OURS = list(range(21, 56))


def claim_id(number: int) -> str:
    (cid,) = select([f"C{number}"])
    return cid


def judge(number: int, **values) -> str:
    """The verdict of claim ``number``'s rule on metrics given as a value (3 identical seeds) or a list per seed."""
    ms = {k: Metric(k, [float(x) for x in (v if isinstance(v, list) else [v] * 3)]) for k, v in values.items()}
    verdict = CLAIMS[claim_id(number)].rule(ms)
    assert verdict.reason_en and verdict.reason_zh
    return verdict.verdict


# --- §3 -------------------------------------------------------------------------------------------------------


def test_c21_rule():
    base = dict(nope_equivariance_err=1e-16, wo_da_ni_diff_nope=1e-16, wo_da_ni_diff_sinusoidal=1.5)
    assert judge(21, **base, causal_nope_order_diff=0.01, nope_gain=0.6) == "nuanced"
    assert judge(21, **base, causal_nope_order_diff=0.0, nope_gain=0.05) == "supported"
    assert judge(21, **{**base, "nope_equivariance_err": 0.3}, causal_nope_order_diff=0.01, nope_gain=0.6) == "refuted"


def test_c22_rule():
    assert judge(22, in_sinusoidal=0.70, in_concat=0.72, concat_params_ratio=3.9, train_steps=200) == "supported"
    assert judge(22, in_sinusoidal=0.90, in_concat=0.70, concat_params_ratio=3.9, train_steps=200) == "refuted"
    assert (
        judge(22, in_sinusoidal=[0.7, 0.9, 0.7], in_concat=[0.72, 0.7, 0.72], concat_params_ratio=3.9, train_steps=200)
        == "inconclusive"
    )


def test_c23_rule():
    ok = {f"probe_{p}_acc_d{d}": 1.0 for p in ("token", "pos") for d in (16, 64, 256)}
    assert judge(23, **ok) == "supported"
    assert judge(23, **{**ok, "probe_pos_acc_d64": 0.9}) == "nuanced"
    assert judge(23, **{**ok, "probe_pos_acc_d64": 0.9, "probe_pos_acc_d256": 0.5}) == "refuted"


def test_c24_c25_rules():
    assert judge(24, formula_err_fp64=1e-14, formula_err_fp32=2e-5, formula_err_fp32_pos10k=3e-4) == "supported"
    assert judge(24, formula_err_fp64=1e-3, formula_err_fp32=2e-5, formula_err_fp32_pos10k=3e-4) == "refuted"
    assert judge(25, freq_decreasing=1, wavelength_dim0=6.28, wavelength_last=4.7e4) == "supported"
    assert judge(25, freq_decreasing=0, wavelength_dim0=6.28, wavelength_last=4.7e4) == "refuted"


def test_c26_rule_catches_the_swapped_clock_hands():
    real = dict(step_change_high_freq=0.96, step_change_low_freq=1e-4, wavelength_dim0=6.28, wavelength_last=4.7e4)
    assert judge(26, **real) == "refuted"
    swapped = dict(step_change_high_freq=1e-4, step_change_low_freq=0.96, wavelength_dim0=4.7e4, wavelength_last=6.28)
    assert judge(26, **swapped) == "supported"
    assert judge(26, **{**real, "wavelength_dim0": 5e4}) == "nuanced"


def test_c27_rule():
    base = dict(
        rotation_residual=1e-14, dot_shift_spread=1e-16, offset_r2_learned=0.1, offset_r2_rope=1.0, offset_r2_alibi=1.0
    )
    assert judge(27, **base, offset_r2_sinusoidal=0.1) == "nuanced"
    assert judge(27, **base, offset_r2_sinusoidal=0.95) == "supported"
    assert judge(27, **{**base, "rotation_residual": 1e-3}, offset_r2_sinusoidal=0.95) == "refuted"
    assert judge(27, **base, offset_r2_sinusoidal=[0.95, 0.1, 0.1]) == "inconclusive"


def test_c28_rule():
    assert judge(28, **{"frac_pairs_cos_above_0.1": 0.01, "max_offdiag_cos": 0.09}) == "supported"
    assert judge(28, **{"frac_pairs_cos_above_0.1": 0.3, "max_offdiag_cos": 1.0}) == "nuanced"
    assert judge(28, **{"frac_pairs_cos_above_0.1": 0.7, "max_offdiag_cos": 1.0}) == "refuted"


def _pe(**deg):
    base = dict(
        train_length=32,
        in_sinusoidal=0.7,
        past_sinusoidal=3.8,
        uniform=2.77,
        floor=0.565,
        deg_alibi=0.05,
        deg_rope=1.0,
        deg_t5=0.1,
        deg_shaw=0.1,
        deg_none=1.0,
    )
    return {**base, **deg}


def test_c29_rule_can_refute_extrapolation():
    assert judge(29, **_pe(deg_sinusoidal=1.5)) == "refuted"
    assert judge(29, **_pe(deg_sinusoidal=0.05)) == "supported"
    assert judge(29, **_pe(deg_sinusoidal=0.3)) == "nuanced"
    assert judge(29, **_pe(deg_sinusoidal=1.5, deg_alibi=0.8)) == "inconclusive"  # the task allows no extrapolation


def test_c30_c31_rules():
    assert judge(30, learned_raises_past_table=1, in_learned=0.7, past_learned=3.8, deg_learned=1.5) == "supported"
    assert judge(30, learned_raises_past_table=1, in_learned=0.7, past_learned=0.8, deg_learned=0.05) == "nuanced"
    assert judge(30, learned_raises_past_table=0, in_learned=0.7, past_learned=0.8, deg_learned=0.05) == "refuted"
    assert judge(31, in_sinusoidal=0.70, in_learned=0.72, floor=0.565, train_steps=200) == "supported"
    assert judge(31, in_sinusoidal=0.90, in_learned=0.70, floor=0.565, train_steps=200) == "refuted"
    assert (
        judge(31, in_sinusoidal=[0.9, 0.7, 0.7], in_learned=[0.7, 0.71, 0.9], floor=0.565, train_steps=200)
        == "inconclusive"
    )


def test_c32_rule():
    assert judge(32, rope_offset_only_err=1e-15) == "supported"
    assert judge(32, rope_offset_only_err=0.5) == "nuanced"


# --- §4 -------------------------------------------------------------------------------------------------------


def _c33(nores, nonorm, excess):
    return dict(
        depth_deep=6,
        nan_or_osc_no_residual=nores,
        nan_or_osc_no_norm=nonorm,
        broken_runs=4,
        nan_or_osc_pre_same_lrs=0,
        excess_no_residual=excess,
        excess_no_norm=excess,
        final_no_residual_mid=2.7,
        final_no_norm_mid=2.2,
        final_pre_mid=0.7,
        failed_no_residual=2,
        failed_no_norm=1,
        nan_no_residual=0,
        nan_no_norm=1,
    )


def test_c33_rule():
    assert judge(33, **_c33(2, 1, 2.0)) == "supported"
    assert judge(33, **_c33(0, 1, 2.0)) == "nuanced"
    assert judge(33, **_c33(0, 0, 0.0)) == "refuted"


def test_c34_rule():
    base = dict(
        depth_shallow=2,
        depth_deep=6,
        degradation_residual=-0.05,
        grad_ratio_pre_init=2.2,
        grad_ratio_pre_trained=8.0,
        grad_ratio_no_residual_init=1.8,
        token_cos_no_residual_init=0.99,
        token_cos_pre_init=0.6,
    )
    assert judge(34, **base, degradation_no_residual=1.5, grad_ratio_no_residual_trained=1.5) == "supported"
    assert judge(34, **base, degradation_no_residual=1.5, grad_ratio_no_residual_trained=0.002) == "nuanced"
    assert judge(34, **base, degradation_no_residual=0.0, grad_ratio_no_residual_trained=1.5) == "refuted"


def test_c35_rule():
    base = dict(steps_cap=400, mse0_plain=1.0, mse0_residual=0.3)
    assert (
        judge(35, **base, steps_plain=400, steps_residual=180, final_mse_plain=0.8, final_mse_residual=0.003)
        == "supported"
    )
    assert (
        judge(35, **base, steps_plain=300, steps_residual=400, final_mse_plain=0.001, final_mse_residual=0.02)
        == "refuted"
    )


def test_c36_rule_refutes_the_post_norm_highway():
    base = dict(
        depth_deep=6,
        highway_gain_post_init=0.2,
        highway_gain_pre=1.0,
        highway_gain_deepnorm=0.5,
        grad_ratio_post_trained=2.0,
        grad_ratio_pre_trained=8.0,
    )
    assert judge(36, **base, highway_gain_post=0.06) == "refuted"
    assert judge(36, **base, highway_gain_post=0.9) == "supported"
    assert judge(36, **base, highway_gain_post=[0.9, 0.06, 0.06]) == "inconclusive"


def test_c37_rule():
    base = dict(depth_shallow=2, depth_deep=6, final_pre_shallow=0.8, best_post=1.1, failed_pre=0, n_lrs=3)
    assert judge(37, **base, best_pre=0.73, failed_post=1) == "nuanced"
    assert judge(37, **base, best_pre=0.73, failed_post=0) == "supported"
    assert judge(37, **base, best_pre=1.5, failed_post=1) == "refuted"


def test_c38_rule():
    base = dict(dep_train_ln=0.0, dep_eval_bn=0.0, val_ln=0.84, train_eval_gap_bn=0.009, spike_ln=0.5, spike_bn=0.45)
    assert judge(38, **base, dep_train_bn=0.09, val_bn=0.80) == "nuanced"
    assert judge(38, **base, dep_train_bn=0.09, val_bn=1.20) == "supported"
    assert judge(38, **base, dep_train_bn=0.0, val_bn=0.80) == "refuted"


def test_c39_rule():
    base = dict(depth_deep=6, score_std_layernorm=1.2, failed_pre=0, n_lrs=3)
    assert judge(39, **base, score_std_no_norm=8.6, failed_no_norm=1) == "supported"
    assert judge(39, **base, score_std_no_norm=1e6, failed_no_norm=0) == "supported"
    assert judge(39, **base, score_std_no_norm=1.3, failed_no_norm=0) == "refuted"


def test_c39_reason_says_diverged_instead_of_printing_the_cap():
    ms = {
        k: Metric(k, [float(v)] * 3)
        for k, v in dict(
            depth_deep=12, score_std_layernorm=1.45, failed_pre=0, n_lrs=4, score_std_no_norm=1e6, failed_no_norm=2
        ).items()
    }
    verdict = CLAIMS[claim_id(39)].rule(ms)
    assert "not finite (training diverged) without" in verdict.reason_en
    assert "非有限（训练发散）" in verdict.reason_zh
    assert "e+06" not in verdict.reason_en + verdict.reason_zh
    ms["score_std_no_norm"] = Metric("score_std_no_norm", [9.0, 1e6, 11.0])
    assert "10 ± 1.41 (1 of 3 seeds diverged)" in CLAIMS[claim_id(39)].rule(ms).reason_en


def test_c40_c41_c42_rules():
    base = dict(diff_unbiased_variance=0.05, diff_wrong_dim=2.7)
    assert judge(40, **base, err_ours_vs_formula=1e-15, err_torch_vs_formula=1e-15) == "supported"
    assert judge(40, **base, err_ours_vs_formula=0.1, err_torch_vs_formula=1e-15) == "refuted"
    assert judge(41, diff_std_plus_eps_variant=0.05, diff_mean_order_fp32=2e-7) == "inconclusive"
    assert judge(42, post_norm_parity_err=1e-15, post_norm_formula_err=0, placement_is_post=1) == "supported"
    assert judge(42, post_norm_parity_err=0.3, post_norm_formula_err=0, placement_is_post=1) == "inconclusive"


def test_c43_rule_separates_instability_from_its_claimed_cause():
    base = dict(depth_deep=6, failed_pre=0, lr_spread_pre=0.25, rms_growth_post_init=1.0, rms_growth_pre_init=1.8)
    assert judge(43, **base, failed_post=1, lr_spread_post=1.6, rms_growth_post=1.08, rms_growth_pre=1.95) == "nuanced"
    assert judge(43, **base, failed_post=1, lr_spread_post=1.6, rms_growth_post=3.0, rms_growth_pre=1.5) == "supported"
    assert judge(43, **base, failed_post=0, lr_spread_post=0.25, rms_growth_post=3.0, rms_growth_pre=1.5) == "refuted"


def test_c44_c45_rules():
    base = dict(
        depth_deep=6,
        n_lrs=3,
        lr_spread_deepnorm=1.0,
        failed_deepnorm=1,
        rough_deepnorm=0.5,
        best_pre=0.7,
        best_post=1.1,
        best_deepnorm=1.8,
    )
    pre_better = dict(lr_spread_pre=0.25, lr_spread_post=1.6, failed_pre=0, failed_post=1)
    assert judge(44, **base, **pre_better, rough_pre=0.2, rough_post=0.6) == "supported"
    assert judge(44, **base, **pre_better, rough_pre=0.3, rough_post=0.3) == "nuanced"
    post_better = dict(lr_spread_pre=1.6, lr_spread_post=0.25, failed_pre=1, failed_post=0)
    assert judge(44, **base, **post_better, rough_pre=0.6, rough_post=0.2) == "refuted"
    assert judge(45, **pre_better) == "supported"
    assert judge(45, **post_better) == "nuanced"


# --- §5 -------------------------------------------------------------------------------------------------------


def test_c46_c53_rules():
    base = dict(rows_checked=17, steps_missing=0, output_equals_input_shape=1, ffn_hidden_width=64)
    assert judge(46, **base, shape_mismatches=0) == "supported"
    assert judge(46, **base, shape_mismatches=2) == "refuted"
    base = dict(ffn_share_d16=0.65, ffn_share_d512_swiglu=0.67, ffn_share_d512_ff1x=0.33, norm_share_d512=0.001)
    assert judge(53, **base, ffn_share_d512=0.67, attn_share_d512=0.33) == "supported"
    assert judge(53, **base, ffn_share_d512=0.33, attn_share_d512=0.66) == "refuted"


def test_c47_rule():
    base = dict(chance=1 / 64, heads_on_offset1_h8=2, heads_on_offset2_h8=2, acc_h2=1.0, head_diversity_h8=0.05)
    assert judge(47, **base, acc_h1=1.0, acc_h8=0.95) == "nuanced"
    assert judge(47, **base, acc_h1=0.5, acc_h8=0.95) == "supported"
    assert judge(47, **base, acc_h1=1.0, acc_h8=0.5) == "refuted"


def test_c48_rule_sees_the_leak_that_flatters_the_loss():
    base = dict(
        raised_merge=0,
        output_change_split=0.02,
        output_change_merge=0.03,
        future_leak_split=0.5,
        future_leak_correct=0.0,
        floor=0.565,
        tf_loss_correct=0.7,
        prefix_loss_correct=0.7,
    )
    assert judge(48, **base, raised_split=0, tf_loss_split=0.3, prefix_loss_split=2.0) == "nuanced"
    assert judge(48, **base, raised_split=0, tf_loss_split=0.9, prefix_loss_split=2.0) == "supported"
    assert judge(48, **base, raised_split=0, tf_loss_split=0.7, prefix_loss_split=0.7) == "refuted"
    assert judge(48, **base, raised_split=1, tf_loss_split=0.9, prefix_loss_split=2.0) == "refuted"


def test_c49_rule():
    names = ("right_pad_diff", "pad_content_diff", "left_pad_diff", "encoder_pad_diff")
    assert judge(49, **{n: 1e-16 for n in names}, left_pad_naive_positions_diff=1.2) == "supported"
    assert judge(49, **{n: 1e-3 for n in names}, left_pad_naive_positions_diff=1.2) == "refuted"


def test_c50_c51_rules():
    base = dict(n_layers=3, final_correct=1.0, rough_correct=0.2, spike_correct=0.1)
    assert judge(50, **base, final_miswired=1.0, rough_miswired=0.8, spike_miswired=0.1) == "supported"
    assert judge(50, **base, final_miswired=1.3, rough_miswired=0.2, spike_miswired=0.1) == "nuanced"
    assert judge(50, **base, final_miswired=1.0, rough_miswired=0.2, spike_miswired=0.1) == "refuted"
    base = dict(n_layers=3, final_correct=1.0, params_correct=1000, params_shared=900)
    assert judge(51, **base, final_shared=1.2) == "supported"
    assert judge(51, **base, final_shared=1.01) == "refuted"
    assert judge(51, **base, final_shared=[1.2, 1.0, 1.0]) == "inconclusive"


def test_c52_c54_rules():
    assert judge(52, val_ff1x=1.2, val_ff4x=1.0, val_ff8x=1.0, floor=0.565) == "supported"
    assert judge(52, val_ff1x=1.2, val_ff4x=1.0, val_ff8x=0.8, floor=0.565) == "nuanced"
    assert judge(52, val_ff1x=0.9, val_ff4x=1.2, val_ff8x=0.9, floor=0.565) == "refuted"
    base = dict(n_train_tokens_small=1024, gap_ff1x=0.5)
    assert judge(54, **base, gap_ff4x=0.9, gap_ff4x_attn_dropout=0.85, gap_ff4x_ffn_dropout=0.6) == "supported"
    assert judge(54, **base, gap_ff4x=0.9, gap_ff4x_attn_dropout=0.85, gap_ff4x_ffn_dropout=0.9) == "nuanced"
    assert judge(54, **base, gap_ff4x=0.5, gap_ff4x_attn_dropout=0.5, gap_ff4x_ffn_dropout=0.6) == "refuted"


def test_c55_rule():
    base = dict(nan_large_init=0, final_large_init=2.8, nan_high_lr=1, final_high_lr=2.77)
    assert (
        judge(55, **base, failed_pre_mid=0, failed_large_init=1, failed_high_lr=1, failed_post_any_lr=1) == "supported"
    )
    assert judge(55, **base, failed_pre_mid=0, failed_large_init=1, failed_high_lr=0, failed_post_any_lr=1) == "nuanced"
    assert judge(55, **base, failed_pre_mid=0, failed_large_init=0, failed_high_lr=0, failed_post_any_lr=0) == "refuted"
    assert (
        judge(55, **base, failed_pre_mid=1, failed_large_init=1, failed_high_lr=1, failed_post_any_lr=1)
        == "inconclusive"
    )


# --- helpers and the smoke run ----------------------------------------------------------------------------------


def test_markov_task_floor_and_rule():
    import torch

    task = MarkovTask(vocab=16, lags=(2,), p=1.0, seed=0)
    x = task.sample(4, 20, torch.Generator().manual_seed(0))
    assert torch.equal(x[:, 2:], task.table[x[:, :-2]])  # p = 1: the rule always applies
    assert task.floor == 0.0 and MarkovTask(vocab=16, p=0.9).floor == pytest.approx(0.565, abs=1e-3)
    batch = task.batch(x)
    assert (batch["labels"][:, :2] == -100).all()


def test_curve_stats():
    steady = curve_stats([3.0 - i * 0.01 for i in range(100)], uniform=3.0)
    assert steady["rough"] == 0 and steady["spike"] == 0 and not steady["failed"]
    wander = curve_stats([2.77 + (0.2 if (i // 10) % 2 else -0.2) for i in range(100)], uniform=2.77)
    assert wander["rough"] > 0.5 and wander["failed"]
    blown = curve_stats([1.0, 2.0, float("nan"), float("nan")], uniform=2.77)
    assert blown["nan"] == 1 and blown["failed"] and blown["rough"] == 2.0 and math.isnan(blown["final"])


def test_every_claim_of_sections_3_to_5_is_registered_with_its_rule_text():
    ids = [claim_id(n) for n in OURS]
    for cid in ids:
        c = CLAIMS[cid]
        assert c.statement_zh and c.statement_en and c.rule_text and c.metrics and c.section.startswith(("§", "结尾"))


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    out = tmp_path_factory.mktemp("claims-later")
    run_claims([f"C{n}" for n in OURS], preset="smoke", out=out, progress=False)
    return out, json.loads((out / "claims.json").read_text(encoding="utf-8"))


def test_smoke_run_records_every_metric_and_the_main_figures(smoke):
    out, doc = smoke
    assert [int(c["id"][1:].split("-")[0]) for c in doc["claims"]] == OURS
    for c in doc["claims"]:
        assert c["verdict"] in ("supported", "refuted", "nuanced", "inconclusive")
        assert set(c["metrics"]) == set(CLAIMS[c["id"]].metrics)
        assert all(m["n"] == 1 for m in c["metrics"].values())
        assert c["reason_en"] and c["reason_zh"]
    figures = {f for c in doc["claims"] for f in c["figures"]}
    for name in (
        "C29-loss-by-position",
        "C27-scores-by-offset",
        "C44-loss-curves-by-depth-and-lr",
        "C43-residual-rms-and-gradient-per-layer",
        "C44-lr-sensitivity",
        "C35-identity-vs-zero",
        "C38-batchnorm-vs-layernorm",
        "C47-eight-heads-of-size-4",
        "C48-silent-bugs-training",
        "C52-ffn-width-and-overfitting",
        "C53-block-parameters",
        "C25-sinusoidal-table",
    ):
        assert f"figures/{name}.png" in figures
        assert (out / "figures" / f"{name}.png").stat().st_size > 1000


def test_smoke_run_exact_checks_hold(smoke):
    """The measurements that are exact in float64 hold even at the smoke preset."""
    _, doc = smoke
    metric = {k: m["mean"] for c in doc["claims"] for k, m in c["metrics"].items()}
    assert metric["nope_equivariance_err"] < 1e-12 and metric["wo_da_ni_diff_nope"] < 1e-12
    assert metric["rotation_residual"] < 1e-9 and metric["offset_r2_rope"] > 0.999
    assert metric["formula_err_fp64"] < 1e-9 and metric["err_ours_vs_formula"] < 1e-10
    assert metric["right_pad_diff"] < 1e-9 and metric["left_pad_diff"] < 1e-9
    assert metric["shape_mismatches"] == 0 and metric["future_leak_correct"] == 0
    assert metric["highway_gain_pre"] == pytest.approx(1.0, abs=1e-6)
    assert metric["learned_raises_past_table"] == 1
