"""§4: the claims judged on the norm-depth grid (``norm_depth``) about residuals and normalisation: C33, C34, C36,
C37, C39 (Pre- vs Post-Norm, C43–C45, are in ``placement_claims``). Each rule's thresholds are the constants below
(and ``rules.TOL``, ``norm_depth.OSCILLATION``), written once into the rule text, the reasons and the decision."""

from __future__ import annotations

import math

from anatomy.experiments.claims.norm_depth import OSCILLATION
from anatomy.experiments.registry import Metric, Verdict, claim
from anatomy.experiments.rules import (
    TOL,
    all_or_none,
    count_seeds,
    decide,
    fmt_blown,
    fmt_count,
    fmt_values,
    num,
    per_seed,
    setting,
)

BROKEN_SHARE = 0.5  # C33: share of the broken stacks' runs that go NaN or oscillate for "soon NaN or oscillates"
VANISHED = 0.1  # C34: the gradient reaching layer 1 below this fraction of the last layer's has vanished
UNDAMPED = (0.5, 2.0)  # C36: a highway gain in this range passes the gradient undamped
SCORE_BLOWUP = 2  # C39: the no-norm scores' std above this multiple of the LayerNorm one counts as unstable


# --- C33 ------------------------------------------------------------------------------------------------------


# the per-seed rows of C33's rule: the runs that broke, by arm, and how much worse they ended
_C33_ROWS = (
    "nan_or_osc_no_residual",
    "nan_or_osc_no_norm",
    "broken_runs",
    "nan_or_osc_pre_same_lrs",
    "excess_no_residual",
    "excess_no_norm",
)


@claim(
    "C33-six-layers-without-addnorm",
    experiment="norm-depth-grid",
    metrics=(
        "depth_deep",
        *_C33_ROWS,
        "final_no_residual_mid",
        "final_no_norm_mid",
        "final_pre_mid",
        "failed_no_residual",
        "failed_no_norm",
        "nan_no_residual",
        "nan_no_norm",
    ),
    rule_text="Deepest grid depth (6 at quick), no warm-up, no clipping, the two highest learning rates. 'NaN or "
    f"oscillation' = a NaN loss or a rise of > {OSCILLATION} nats above the running minimum after the "
    f"first 10% of steps. Supported if ≥ {BROKEN_SHARE:.0%} of the no-residual / no-norm runs do that on "
    f"every seed; nuanced if fewer do but they still end > {TOL} nats worse than Pre-Norm (failure by "
    "stalling); refuted if none does and they match Pre-Norm; otherwise inconclusive.",
)
def _c33(ms: dict[str, Metric]) -> Verdict:
    depth = setting(ms, "depth_deep")
    rows = per_seed(ms, *_C33_ROWS)
    frac = [(a + b) / n for a, b, n, *_ in rows]
    excess = [max(x, y) for *_, x, y in rows]
    nums_en = (
        f"At {depth} layers, of the runs without a residual or without any norm, {fmt_values(frac)} went NaN or "
        f"oscillated (Pre-Norm at the same rates: {ms['nan_or_osc_pre_same_lrs'].fmt()} runs); their final loss "
        f"was above Pre-Norm's by {ms['excess_no_residual'].fmt()} (no residual) and "
        f"{ms['excess_no_norm'].fmt()} (no norm) nats."
    )
    nums_zh = (
        f"{depth} 层时，去掉残差或去掉归一化的运行中有 {fmt_values(frac)} 出现 NaN 或震荡（相同学习率下 "
        f"Pre-Norm：{ms['nan_or_osc_pre_same_lrs'].fmt()} 次）；最终 loss 比 Pre-Norm 高 "
        f"{ms['excess_no_residual'].fmt()}（无残差）和 {ms['excess_no_norm'].fmt()}（无归一化）nat。"
    )
    stalled_en = (
        " Training does fail, but mostly by stalling rather than blowing up: "
        f"{ms['failed_no_residual'].fmt()} + {ms['failed_no_norm'].fmt()} of the "
        f"{fmt_count(ms['broken_runs'])} broken runs failed, {ms['nan_no_residual'].fmt()} (no residual) and "
        f"{ms['nan_no_norm'].fmt()} (no norm) of them with NaN."
    )
    stalled_zh = (
        f"训练确实失败，但多是停滞而非爆炸：{fmt_count(ms['broken_runs'])} 次错误结构运行中失败 "
        f"{ms['failed_no_residual'].fmt()} + {ms['failed_no_norm'].fmt()} 次，其中出现 NaN 的：无残差 "
        f"{ms['nan_no_residual'].fmt()} 次，无归一化 {ms['nan_no_norm'].fmt()} 次。"
    )
    return decide(
        nums_en,
        nums_zh,
        ("supported", all(f >= BROKEN_SHARE for f in frac), "", ""),
        (
            "nuanced",
            all(0 < f < BROKEN_SHARE for f in frac) or all(f < BROKEN_SHARE and e > TOL for f, e in zip(frac, excess)),
            stalled_en,
            stalled_zh,
        ),
        (
            "refuted",
            all(f == 0 and e <= TOL for f, e in zip(frac, excess)),
            " The broken stacks trained as well as Pre-Norm.",
            "这些“错误”结构训练得和 Pre-Norm 一样好。",
        ),
    )


# --- C34 ------------------------------------------------------------------------------------------------------


@claim(
    "C34-residual-degradation-not-vanishing",
    experiment="norm-depth-grid",
    metrics=(
        "depth_shallow",
        "depth_deep",
        "degradation_no_residual",
        "degradation_residual",
        "grad_ratio_no_residual_init",
        "grad_ratio_no_residual_trained",
        "grad_ratio_pre_init",
        "grad_ratio_pre_trained",
        "token_cos_no_residual_init",
        "token_cos_pre_init",
    ),
    rule_text=f"Degradation = the deep stack ends > {TOL} nats worse than the shallow one without residuals while "
    f"with residuals it does not. Vanishing = the gradient reaching layer 1 is < {VANISHED}× the one at "
    "the last layer without residuals (at init or after training) but not with them. Supported if "
    "degradation and no vanishing on every seed; nuanced if both (residuals fix both); refuted if no "
    "degradation on any seed; otherwise inconclusive.",
)
def _c34(ms: dict[str, Metric]) -> Verdict:
    depth, shallow = setting(ms, "depth_deep"), setting(ms, "depth_shallow")
    deg_plain, deg_res = ms["degradation_no_residual"], ms["degradation_residual"]
    g0, g1 = ms["grad_ratio_no_residual_init"], ms["grad_ratio_no_residual_trained"]
    r0, r1 = ms["grad_ratio_pre_init"], ms["grad_ratio_pre_trained"]
    degr, n = count_seeds(ms, ("degradation_no_residual", "degradation_residual"), lambda a, b: a > TOL and b <= TOL)
    vanish, _ = count_seeds(
        ms,
        (
            "grad_ratio_no_residual_init",
            "grad_ratio_no_residual_trained",
            "grad_ratio_pre_init",
            "grad_ratio_pre_trained",
        ),
        lambda a, a2, b, b2: min(a, a2) < VANISHED <= min(b, b2),
    )
    nums_en = (
        f"Going from {shallow} to {depth} layers changed the final loss by {deg_plain.fmt()} without residuals "
        f"and {deg_res.fmt()} with them (degradation). The gradient reaching layer 1, relative to the last "
        f"layer, is {g0.fmt()}× at init and {g1.fmt()}× after training without residuals, {r0.fmt()}× and "
        f"{r1.fmt()}× with them. Token vectors after the last block have mean cosine "
        f"{ms['token_cos_no_residual_init'].fmt()} without and {ms['token_cos_pre_init'].fmt()} with residuals "
        "at init."
    )
    nums_zh = (
        f"从 {shallow} 层加到 {depth} 层，无残差时最终 loss 变化 {deg_plain.fmt()}，有残差时 {deg_res.fmt()}"
        f"（退化）。到达第 1 层的梯度与最后一层之比：无残差时初始化 {g0.fmt()}、训练后 {g1.fmt()}；有残差时 "
        f"{r0.fmt()} 和 {r1.fmt()}。初始化时最后一层输出的 token 向量平均余弦相似度：无残差 "
        f"{ms['token_cos_no_residual_init'].fmt()}，有残差 {ms['token_cos_pre_init'].fmt()}。"
    )
    return decide(
        nums_en,
        nums_zh,
        (
            "supported",
            degr == n and vanish == 0,
            " Residuals removed the degradation, and the plain stack's gradient did not vanish.",
            "残差消除了退化，而无残差网络的梯度并没有消失。",
        ),
        (
            "nuanced",
            degr == n and vanish == n,
            " Residuals fix the degradation, but without them the gradient also fades on its way down (below "
            f"{VANISHED:.0%} of the top layer's): they fix both, so the 'not vanishing gradients' half does not "
            "hold.",
            f"残差确实解决了退化，但没有残差时梯度向下传播也在衰减（不到最后一层的 {VANISHED:.0%}）："
            "残差两者都解决了，“不是梯度消失”这半句不成立。",
        ),
        ("refuted", degr == 0, " No degradation appeared without residuals.", "去掉残差后没有出现退化。"),
    )


# --- C36 ------------------------------------------------------------------------------------------------------


def _undamped(r: float) -> bool:
    return UNDAMPED[0] <= r <= UNDAMPED[1]


@claim(
    "C36-post-norm-gradient-highway",
    experiment="norm-depth-grid",
    metrics=(
        "depth_deep",
        "highway_gain_post",
        "highway_gain_post_init",
        "highway_gain_pre",
        "highway_gain_deepnorm",
        "grad_ratio_post_trained",
        "grad_ratio_pre_trained",
    ),
    rule_text="The 'highway' is the skip path: ‖∂loss/∂x‖ entering block 1 ÷ entering the last block with every "
    "sub-layer output detached, so the gradient can only travel along the residual path (deepest depth, "
    f"middle learning rate, after training). Undamped = within [{num(UNDAMPED[0])}, {num(UNDAMPED[1])}]. "
    "Supported if Post-Norm's is undamped on every seed; refuted if it is not on any seed; otherwise "
    "inconclusive. The total gradient ratio (sub-layers included) is reported alongside.",
)
def _c36(ms: dict[str, Metric]) -> Verdict:
    depth = setting(ms, "depth_deep")
    hw, hw0, hw_pre = ms["highway_gain_post"], ms["highway_gain_post_init"], ms["highway_gain_pre"]
    total, total_pre = ms["grad_ratio_post_trained"], ms["grad_ratio_pre_trained"]
    nums_en = (
        "Gradient along the residual path alone (sub-layer outputs held constant), arriving at layer 1 relative "
        f"to the last layer ({depth} layers): Post-Norm {hw.fmt()} after training ({hw0.fmt()} at init), "
        f"Pre-Norm {hw_pre.fmt()}, DeepNorm {ms['highway_gain_deepnorm'].fmt()} (1 = undamped). The total "
        f"gradient, sub-layers included, arrives at {total.fmt()} (Post) and {total_pre.fmt()} (Pre)."
    )
    nums_zh = (
        f"只沿残差路径（子层输出视为常数）传到第 1 层的梯度与最后一层之比（{depth} 层）：Post-Norm 训练后 "
        f"{hw.fmt()}（初始化时 {hw0.fmt()}），Pre-Norm {hw_pre.fmt()}，DeepNorm "
        f"{ms['highway_gain_deepnorm'].fmt()}（1 表示不衰减）。包含子层在内的总梯度之比为 "
        f"{total.fmt()}（Post）和 {total_pre.fmt()}（Pre）。"
    )
    post_undamped = [_undamped(v) for v in hw.values]
    pre_ok = all(_undamped(v) for v in hw_pre.values)
    return all_or_none(
        post_undamped,
        nums_en,
        nums_zh,
        refute_en=(
            " The undamped highway is Pre-Norm's, where the skip path is an exact identity; in "
            "Post-Norm every LayerNorm sits on that path and rescales the gradient, layer after "
            "layer."
            if pre_ok
            else " Neither placement keeps the skip path undamped."
        ),
        refute_zh=(
            "不衰减的“高速公路”属于 Pre-Norm，它的跳连路径是严格的恒等映射；Post-Norm 中每个 "
            "LayerNorm 都在这条路径上，逐层重新缩放梯度。"
            if pre_ok
            else "两种放置方式的跳连路径都不是不衰减的。"
        ),
    )


# --- C37 ------------------------------------------------------------------------------------------------------


@claim(
    "C37-any-depth-trainable",
    experiment="norm-depth-grid",
    metrics=(
        "depth_shallow",
        "depth_deep",
        "best_pre",
        "final_pre_shallow",
        "best_post",
        "failed_pre",
        "failed_post",
        "n_lrs",
    ),
    rule_text="Only finite depths can be measured (6 at quick, 12 at full). Supported if the deepest Pre-Norm stack "
    f"at its best learning rate is no more than {TOL} nats worse than the shallow one and no Post-Norm "
    "run failed; nuanced if Pre-Norm holds but Post-Norm failed at some learning rate on every seed; "
    "refuted if Pre-Norm got worse with depth on every seed; otherwise inconclusive.",
)
def _c37(ms: dict[str, Metric]) -> Verdict:
    depth, shallow = setting(ms, "depth_deep"), setting(ms, "depth_shallow")
    nums_en = (
        f"Best final loss over the learning rates at {depth} layers: Pre-Norm {ms['best_pre'].fmt()} ({shallow} "
        f"layers: {ms['final_pre_shallow'].fmt()}), Post-Norm {ms['best_post'].fmt()}, with "
        f"{ms['failed_pre'].fmt()} failed Pre-Norm runs and {ms['failed_post'].fmt()} failed Post-Norm runs out "
        f"of {fmt_count(ms['n_lrs'])} learning rates."
    )
    nums_zh = (
        f"{depth} 层时各学习率中最好的最终 loss：Pre-Norm {ms['best_pre'].fmt()}（{shallow} 层："
        f"{ms['final_pre_shallow'].fmt()}），Post-Norm {ms['best_post'].fmt()}；{fmt_count(ms['n_lrs'])} 个学习"
        f"率中 Pre-Norm 失败 {ms['failed_pre'].fmt()} 次，Post-Norm 失败 {ms['failed_post'].fmt()} 次。"
    )
    pre_ok = [b <= s + TOL for b, s in per_seed(ms, "best_pre", "final_pre_shallow")]
    post_fails = [f > 0 for f in ms["failed_post"].values]
    return decide(
        nums_en,
        nums_zh,
        (
            "supported",
            all(pre_ok) and not any(post_fails),
            " Deeper stayed trainable in both placements.",
            "两种放置方式加深后都仍可训练。",
        ),
        (
            "nuanced",
            all(pre_ok) and all(post_fails),
            " With residuals and Pre-Norm the deeper stack trained as well; with Post-Norm it depends on the "
            "learning rate: depth alone does not guarantee trainability.",
            "有残差且用 Pre-Norm 时更深的堆叠照样能训练；用 Post-Norm 时取决于学习率：单靠层数并不能保证可训练。",
        ),
        (
            "refuted",
            not any(pre_ok),
            " Even Pre-Norm trained worse when deeper.",
            "即使是 Pre-Norm，加深后也训练得更差。",
        ),
    )


# --- C39 ------------------------------------------------------------------------------------------------------


@claim(
    "C39-layernorm-stabilises-scores",
    experiment="norm-depth-grid",
    metrics=("depth_deep", "score_std_layernorm", "score_std_no_norm", "failed_pre", "failed_no_norm", "n_lrs"),
    rule_text="Pre-Norm vs the same stack with every norm removed. Supported if, on every seed, the no-norm scores' "
    f"std is > {SCORE_BLOWUP}× the LayerNorm one (or non-finite) or the no-norm stack failed at more "
    "learning rates; refuted if neither on any seed; otherwise inconclusive.",
)
def _c39(ms: dict[str, Metric]) -> Verdict:
    ln, raw = ms["score_std_layernorm"], ms["score_std_no_norm"]
    depth = setting(ms, "depth_deep")
    nums_en = (
        f"Spread (std) of the last layer's attention scores after training ({depth} layers, lr 3e-3): "
        f"{ln.fmt()} with LayerNorm, {fmt_blown(raw)} without; runs that failed: {ms['failed_pre'].fmt()} with "
        f"LayerNorm (of {fmt_count(ms['n_lrs'])} rates), {ms['failed_no_norm'].fmt()} without (of 2)."
    )
    nums_zh = (
        f"训练后最后一层注意力分数的标准差（{depth} 层，lr 3e-3）：有 LayerNorm {ln.fmt()}，无 "
        f"{fmt_blown(raw, zh=True)}；失败次数：有 LayerNorm {ms['failed_pre'].fmt()}（共 "
        f"{fmt_count(ms['n_lrs'])} 个学习率），无 {ms['failed_no_norm'].fmt()}（共 2 个）。"
    )
    stable = [
        (r > SCORE_BLOWUP * a or not math.isfinite(r)) or f > p
        for a, r, f, p in per_seed(ms, "score_std_layernorm", "score_std_no_norm", "failed_no_norm", "failed_pre")
    ]
    return all_or_none(
        stable,
        nums_en,
        nums_zh,
        refute_en=" Without LayerNorm the scores were no larger and training no worse.",
        refute_zh="去掉 LayerNorm 后分数并没有更大，训练也没有更差。",
    )
