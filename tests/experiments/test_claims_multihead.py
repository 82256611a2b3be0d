"""Claims C1–C3, C7–C20 (§1–§2): every rule on synthetic metric values, for each of its outcomes; the helpers the
experiments rely on; and a smoke run that records every metric."""

from __future__ import annotations

import pytest
import torch

from anatomy.experiments.claims.head_count import PAIR_K, PAIR_T, pair_batch
from anatomy.experiments.probes import attention_entropy, offset_profile
from anatomy.experiments.registry import CLAIMS, Metric
from anatomy.experiments.runner import run_claims, select

MY_IDS = [
    "C1",
    "C2",
    "C3",
    "C7",
    "C8",
    "C9",
    "C10",
    "C11",
    "C12",
    "C13",
    "C14",
    "C15",
    "C16",
    "C17",
    "C18",
    "C19",
    "C20",
]


def _claim(prefix: str):
    (cid,) = select([prefix])
    return CLAIMS[cid]


def _ms(prefix: str, n: int = 3, **values) -> dict[str, Metric]:
    """Every metric of the claim at 0.0 on ``n`` seeds, then the given ones (a number: the same on every seed)."""
    c = _claim(prefix)
    out = {m: Metric(m, [0.0] * n) for m in c.metrics}
    for k, v in values.items():
        assert k in c.metrics, f"{k} is not a metric of {c.id}"
        out[k] = Metric(k, list(v) if isinstance(v, (list, tuple)) else [float(v)] * n)
    return out


CASES = [
    # C1: diffuse on both tasks / sharp on both / mixed / seeds disagree
    ("C1", dict(ent_lm_h1=0.9, ent_pair_h1=0.85), "supported"),
    ("C1", dict(ent_lm_h1=0.2, ent_pair_h1=0.3), "refuted"),
    ("C1", dict(ent_lm_h1=0.9, ent_pair_h1=0.3), "nuanced"),
    ("C1", dict(ent_lm_h1=[0.9, 0.2, 0.9], ent_pair_h1=[0.9, 0.2, 0.9]), "inconclusive"),
    # C2: single head at the one-relation ceiling / above it / as good as four heads / four heads failed
    ("C2", dict(acc_pair_h1=9.5, acc_pair_h4=99.0), "supported"),
    ("C2", dict(acc_pair_h1=30.0, acc_pair_h4=99.0), "nuanced"),
    ("C2", dict(acc_pair_h1=97.0, acc_pair_h4=99.0), "refuted"),
    ("C2", dict(acc_pair_h1=9.5, acc_pair_h4=40.0), "inconclusive"),
    # C3
    ("C3", dict(pair_h4_covers=1, pair_h4_ablation_min_drop=0.8, lm_h4_prev_char_mass=0.7), "supported"),
    ("C3", dict(pair_h4_covers=0, pair_h4_ablation_min_drop=0.1, lm_h4_prev_char_mass=0.2), "refuted"),
    ("C3", dict(pair_h4_covers=1, pair_h4_ablation_min_drop=0.8, lm_h4_prev_char_mass=0.3), "nuanced"),
    # C7
    (
        "C7",
        dict(mc_maxp_unscaled_dk64=0.95, mc_jac_ratio_dk64=0.05, real_maxp_unscaled_dk64_torchinit=0.9),
        "supported",
    ),
    ("C7", dict(mc_maxp_unscaled_dk64=0.8, mc_jac_ratio_dk64=0.8, real_maxp_unscaled_dk64_torchinit=0.3), "nuanced"),
    ("C7", dict(mc_maxp_unscaled_dk64=0.3, mc_jac_ratio_dk64=1.0), "refuted"),
    # C8
    ("C8", dict(progress_after_q1_unscaled=0.01, progress_after_q1_scaled=0.3, unscaled_minus_scaled=0.5), "supported"),
    ("C8", dict(progress_after_q1_unscaled=0.3, progress_after_q1_scaled=0.3, unscaled_minus_scaled=0.1), "nuanced"),
    ("C8", dict(progress_after_q1_unscaled=0.3, progress_after_q1_scaled=0.3, unscaled_minus_scaled=0.0), "refuted"),
    # C9, C10
    ("C9", dict(shapes_match=1, output_shape_equals_input=1, maxdiff_vs_torch_fp64=1e-16), "supported"),
    ("C9", dict(shapes_match=0, output_shape_equals_input=1, maxdiff_vs_torch_fp64=1e-16), "refuted"),
    ("C10", dict(faults_silent=1, faults_min_rel_err=1.2), "supported"),
    ("C10", dict(faults_silent=0, faults_min_rel_err=0.0), "refuted"),
    ("C10", dict(faults_silent=0.5, faults_min_rel_err=1.0), "nuanced"),
    # C11
    ("C11", dict(speedup_math_min=1.5, speedup_math_max=2.0, speedup_sdpa_min=2.0, threads=1), "supported"),
    ("C11", dict(speedup_math_min=0.9, speedup_math_max=1.0, speedup_sdpa_min=0.9, threads=1), "refuted"),
    ("C11", dict(speedup_math_min=0.8, speedup_math_max=1.5, speedup_sdpa_min=2.0, threads=2), "nuanced"),
    # C12, C13, C14
    ("C12", dict(lm_small_dk_penalty=0.1, cls_small_dk_penalty=5, lm_dk64_minus_best=0.0), "supported"),
    ("C12", dict(lm_small_dk_penalty=-0.05, cls_small_dk_penalty=0.5, lm_dk64_minus_best=0.1), "refuted"),
    ("C12", dict(lm_small_dk_penalty=0.1, cls_small_dk_penalty=0.0, lm_dk64_minus_best=0.1), "nuanced"),
    ("C13", dict(time_ratio_h8_vs_h1=1.5, cls_gap_h8_minus_h1=5), "supported"),
    ("C13", dict(time_ratio_h8_vs_h1=1.0, cls_gap_h8_minus_h1=-1), "refuted"),
    ("C13", dict(time_ratio_h8_vs_h1=1.5, cls_gap_h8_minus_h1=0), "nuanced"),
    ("C14", dict(cls_diff_h8_minus_h4=[0.2, -0.3, 0.1]), "supported"),
    ("C14", dict(cls_diff_h8_minus_h4=[3.0, 3.5, 4.0]), "refuted"),
    ("C14", dict(cls_diff_h8_minus_h4=[-3.0, 2.0, 0.5]), "inconclusive"),
    # C15, C16
    ("C15", dict(torch_minus_best=0.01), "supported"),
    ("C15", dict(torch_minus_best=0.3), "refuted"),
    ("C15", dict(torch_minus_best=0.1), "nuanced"),
    ("C16", dict(step0_maxp_x50=0.95, step0_gradq_ratio_x50=0.01, large_minus_normal=0.5), "supported"),
    ("C16", dict(step0_maxp_x50=0.95, step0_gradq_ratio_x50=200, large_minus_normal=0.4), "nuanced"),
    ("C16", dict(step0_maxp_x50=0.2, step0_gradq_ratio_x50=1, large_minus_normal=0.0), "refuted"),
    # C17–C20
    ("C17", dict(leak_1e9_fp32=0, leak_1e9_bf16=0, fp16_1e9_error=0), "supported"),
    ("C17", dict(leak_1e9_fp32=0, leak_1e9_bf16=0, fp16_1e9_error=1), "nuanced"),
    ("C17", dict(leak_1e9_fp32=0.01, leak_1e9_bf16=0, fp16_1e9_error=0), "refuted"),
    (
        "C18",
        dict(c18_after_fwd=1, c18_after_grad_visible=1, c18_renorm_fwd=1e-3, c18_renorm_grad_visible=1e-3),
        "supported",
    ),
    ("C18", dict(c18_after_fwd=1, c18_after_grad_visible=1, c18_renorm_fwd=0, c18_renorm_grad_visible=0), "nuanced"),
    ("C18", dict(c18_after_fwd=0, c18_after_grad_visible=0, c18_renorm_fwd=0, c18_renorm_grad_visible=0), "refuted"),
    ("C19", dict(causal_future_leak=0, causal_upper_weight_max=0), "supported"),
    ("C19", dict(causal_future_leak=0.1, causal_upper_weight_max=0), "refuted"),
    ("C20", dict(leak_1e9_fp32=0.01, c20_param_maxdiff=0.1, c20_gen_agreement=0.5), "supported"),
    ("C20", dict(leak_1e9_fp32=0, c20_param_maxdiff=0, c20_gen_agreement=1), "refuted"),
    ("C20", dict(leak_1e9_fp32=0, c20_param_maxdiff=1e-7, c20_gen_agreement=1), "nuanced"),
]


@pytest.mark.parametrize("prefix, values, verdict", CASES, ids=[f"{c[0]}-{c[2]}" for c in CASES])
def test_rule_on_synthetic_numbers(prefix, values, verdict):
    ms = _ms(prefix, **values)
    v = _claim(prefix).rule(ms)
    assert v.verdict == verdict, v.reason_en
    assert v.reason_en and v.reason_zh
    key = next(iter(values))  # the reasons quote the numbers they were computed from
    if prefix != "C9":
        assert ms[key].fmt() in v.reason_en and ms[key].fmt() in v.reason_zh


def test_every_rule_has_a_supported_case_and_another_outcome():
    for prefix in MY_IDS:
        outcomes = {verdict for p, _, verdict in CASES if p == prefix}
        assert "supported" in outcomes and len(outcomes) >= 2, prefix


def test_seeds_that_disagree_give_inconclusive():
    ms = _ms("C15", torch_minus_best=[0.01, 0.3, 0.01])
    v = _claim("C15").rule(ms)
    assert v.verdict == "inconclusive" and "disagree" in v.reason_en and "不一致" in v.reason_zh


def test_pair_task_targets_are_the_ordered_pair():
    batch, y = pair_batch(50, torch.Generator().manual_seed(0))
    x, labels = batch["input_ids"], batch["labels"]
    assert x.shape == (50, PAIR_T) and int(x.max()) < PAIR_K
    for t in range(3, PAIR_T):
        assert torch.equal(y[:, t], PAIR_K * x[:, t - 1] + x[:, t - 3])  # ordered: swapping the digits changes y
    assert torch.equal(labels[:, 1:], y[:, :-1])  # the LM at position t predicts labels[t + 1] = y_t
    assert (y[:, :3] == -100).all() and (labels[:, :4] == -100).all()


def test_attention_entropy_and_offset_profile():
    t = 6
    uniform = torch.ones(t, t).tril()
    uniform = (uniform / uniform.sum(-1, keepdim=True))[None, None]  # (1, 1, T, T)
    prev = torch.zeros(1, 1, t, t)
    prev[0, 0, 0, 0] = 1
    for i in range(1, t):
        prev[0, 0, i, i - 1] = 1  # every row on the previous token
    assert attention_entropy(uniform, 1, t).item() == pytest.approx(1.0)
    assert attention_entropy(prev, 1, t).item() == pytest.approx(0.0, abs=1e-12)
    prof = offset_profile(prev, 3)
    assert prof.shape == (1, 4) and prof[0, 1] == 1 and prof[0, [0, 2, 3]].sum() == 0
    with pytest.raises(ValueError):
        attention_entropy(uniform, 0, t)


def test_smoke_run_of_these_claims_records_every_metric(tmp_path):
    doc = run_claims(MY_IDS, preset="smoke", out=tmp_path, progress=False)
    ids = [c["id"] for c in doc["claims"]]
    assert [int(i[1:].split("-")[0]) for i in ids] == [1, 2, 3, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20]
    for c in doc["claims"]:
        assert c["verdict"] in ("supported", "refuted", "nuanced", "inconclusive")
        assert set(c["metrics"]) == set(CLAIMS[c["id"]].metrics)
        for name, m in c["metrics"].items():
            assert m["n"] == 1, name
            assert not (isinstance(m["mean"], str) and m["mean"] == "nan"), f"{c['id']}: {name} is NaN"
        assert c["reason_en"] and c["reason_zh"]
    figures = {f for c in doc["claims"] for f in c["figures"]}
    for name in (
        "C1-C3-attention-per-head",
        "C12-C14-head-count",
        "C5-C8-C16-score-saturation",
        "C8-C15-C16-init-and-scale-training",
        "C17-C20-mask-fills",
    ):
        assert f"figures/{name}.png" in figures
        assert (tmp_path / "figures" / f"{name}.png").stat().st_size > 10_000
