"""§4: the claims judged on the norm-depth grid (``norm_depth``) about where the norm goes, Pre- vs Post-Norm: C43,
C44, C45. Each rule's thresholds are the constants below (and ``rules.TOL``), written once into the rule text, the
reasons and the decision."""

from __future__ import annotations

from anatomy.experiments.registry import Metric, Verdict, claim
from anatomy.experiments.rules import (
    TOL,
    decide,
    fmt_count,
    per_seed,
    setting,
)

ACCUMULATES = 1.5  # C43: residual RMS, last block ÷ first block, above this counts as accumulation


# --- C43, C44, C45 ---------------------------------------------------------------------------------------------


@claim(
    "C43-post-norm-unstable-accumulation",
    experiment="norm-depth-grid",
    metrics=(
        "depth_deep",
        "failed_post",
        "failed_pre",
        "lr_spread_post",
        "lr_spread_pre",
        "rms_growth_post",
        "rms_growth_pre",
        "rms_growth_post_init",
        "rms_growth_pre_init",
    ),
    rule_text="Unstable = Post-Norm failed at more learning rates than Pre-Norm, or its final loss varies over the "
    f"learning rates by > {TOL} nats more. Accumulation = the residual-stream RMS after the last block is "
    f"> {ACCUMULATES}× the one after the first block in Post-Norm and grows more than in Pre-Norm. "
    "Supported if both on every seed; nuanced if unstable but no accumulation on every seed; refuted if "
    "not unstable on any seed; otherwise inconclusive.",
)
def _c43(ms: dict[str, Metric]) -> Verdict:
    depth = setting(ms, "depth_deep")
    post_g, pre_g = ms["rms_growth_post"], ms["rms_growth_pre"]
    unstable = [
        (fp > fq) or (sp > sq + TOL)
        for fp, fq, sp, sq in per_seed(ms, "failed_post", "failed_pre", "lr_spread_post", "lr_spread_pre")
    ]
    accum = [g > ACCUMULATES and g > q for g, q in per_seed(ms, "rms_growth_post", "rms_growth_pre")]
    nums_en = (
        f"{depth} layers: Post-Norm failed at {ms['failed_post'].fmt()} learning rates (Pre-Norm "
        f"{ms['failed_pre'].fmt()}), final-loss spread over learning rates {ms['lr_spread_post'].fmt()} vs "
        f"{ms['lr_spread_pre'].fmt()}. Residual-stream RMS, last block ÷ first block, after training: Post-Norm "
        f"{post_g.fmt()}, Pre-Norm {pre_g.fmt()} (at init {ms['rms_growth_post_init'].fmt()} and "
        f"{ms['rms_growth_pre_init'].fmt()})."
    )
    nums_zh = (
        f"{depth} 层：Post-Norm 在 {ms['failed_post'].fmt()} 个学习率上失败（Pre-Norm {ms['failed_pre'].fmt()}）"
        f"，各学习率最终 loss 的极差 {ms['lr_spread_post'].fmt()} 对 {ms['lr_spread_pre'].fmt()}。训练后残差流 "
        f"RMS（最后一层 ÷ 第一层）：Post-Norm {post_g.fmt()}，Pre-Norm {pre_g.fmt()}（初始化时 "
        f"{ms['rms_growth_post_init'].fmt()} 和 {ms['rms_growth_pre_init'].fmt()}）。"
    )
    pre_grows = all(v > ACCUMULATES for v in pre_g.values)
    return decide(
        nums_en,
        nums_zh,
        ("supported", all(unstable) and all(accum), "", ""),
        (
            "nuanced",
            all(unstable) and not any(accum),
            " Post-Norm is the less stable one, but not because values pile up on its residual path: its "
            "LayerNorm resets the stream after every block."
            + (" The stream that grows is Pre-Norm's, the stable one." if pre_grows else ""),
            "Post-Norm 的确更不稳定，但原因不是残差路径上的数值累积：它的 LayerNorm 在每个 block 之后都把残差流"
            "重新归一化。" + ("真正在增长的是 Pre-Norm 的残差流，而它是稳定的那一个。" if pre_grows else ""),
        ),
        (
            "refuted",
            not any(unstable),
            " Post-Norm was not less stable than Pre-Norm here.",
            "这里 Post-Norm 并不比 Pre-Norm 更不稳定。",
        ),
    )


@claim(
    "C44-pre-norm-smoother",
    experiment="norm-depth-grid",
    metrics=(
        "depth_deep",
        "n_lrs",
        "lr_spread_pre",
        "lr_spread_post",
        "lr_spread_deepnorm",
        "failed_pre",
        "failed_post",
        "failed_deepnorm",
        "rough_pre",
        "rough_post",
        "rough_deepnorm",
        "best_pre",
        "best_post",
        "best_deepnorm",
    ),
    rule_text="Deepest grid depth (6 at quick; 12 at full), learning rates swept without warm-up or clipping. Less "
    f"sensitive = Pre-Norm's final-loss spread over the rates is > {TOL} nats smaller than Post-Norm's, "
    "or fewer Pre-Norm runs failed. Smoother = Pre-Norm's mean roughness (climb-back per unit of descent "
    f"of the smoothed curve; 2 for a NaN run) is > {TOL} lower. Supported if both on every seed, nuanced "
    f"if one on every seed, refuted if neither on any seed and Pre-Norm is rougher by > {TOL} on every "
    "seed; otherwise inconclusive.",
)
def _c44(ms: dict[str, Metric]) -> Verdict:
    depth = setting(ms, "depth_deep")
    less_sensitive = [
        a + TOL < b or fa < fb
        for a, b, fa, fb in per_seed(ms, "lr_spread_pre", "lr_spread_post", "failed_pre", "failed_post")
    ]
    smoother = [a + TOL < b for a, b in per_seed(ms, "rough_pre", "rough_post")]
    rougher = [a > b + TOL for a, b in per_seed(ms, "rough_pre", "rough_post")]
    nums_en = (
        f"{depth} layers, no warm-up, {fmt_count(ms['n_lrs'])} learning rates. Final-loss spread over the "
        f"rates: Pre-Norm {ms['lr_spread_pre'].fmt()}, Post-Norm {ms['lr_spread_post'].fmt()}, DeepNorm "
        f"{ms['lr_spread_deepnorm'].fmt()}; failed runs {ms['failed_pre'].fmt()}, {ms['failed_post'].fmt()}, "
        f"{ms['failed_deepnorm'].fmt()}. Roughness (how much the smoothed curve climbs back per unit of "
        f"descent, mean over rates): Pre {ms['rough_pre'].fmt()}, Post {ms['rough_post'].fmt()}, DeepNorm "
        f"{ms['rough_deepnorm'].fmt()}."
    )
    nums_zh = (
        f"{depth} 层、无 warm-up、{fmt_count(ms['n_lrs'])} 个学习率。各学习率最终 loss 的极差：Pre-Norm "
        f"{ms['lr_spread_pre'].fmt()}，Post-Norm {ms['lr_spread_post'].fmt()}，DeepNorm "
        f"{ms['lr_spread_deepnorm'].fmt()}；失败次数 {ms['failed_pre'].fmt()}、{ms['failed_post'].fmt()}、"
        f"{ms['failed_deepnorm'].fmt()}。粗糙度（平滑后的曲线每下降一单位又回升多少，各学习率平均）：Pre "
        f"{ms['rough_pre'].fmt()}，Post {ms['rough_post'].fmt()}，DeepNorm {ms['rough_deepnorm'].fmt()}。"
    )
    if all(less_sensitive) and all(smoother):
        return Verdict("supported", nums_en, nums_zh)
    if all(less_sensitive) or all(smoother):
        which = "less sensitive to the learning rate" if all(less_sensitive) else "smoother"
        which_zh = "对学习率更不敏感" if all(less_sensitive) else "曲线更平滑"
        return Verdict(
            "nuanced",
            nums_en + f" Pre-Norm was {which} on every seed, but not both.",
            nums_zh + f"Pre-Norm 在每个种子上都{which_zh}，但并非两者兼备。",
        )
    if not any(less_sensitive) and not any(smoother) and all(rougher):
        return Verdict("refuted", nums_en, nums_zh)
    return Verdict(
        "inconclusive",
        nums_en + " The seeds disagree, or the difference is inside the tolerance.",
        nums_zh + "各种子结论不一致，或差异在容差之内。",
    )


@claim(
    "C45-pre-norm-de-facto",
    experiment="norm-depth-grid",
    metrics=("failed_pre", "failed_post", "lr_spread_pre", "lr_spread_post"),
    rule_text="A fact about the literature (sources in the reason); supported if our grid also shows Pre-Norm at "
    f"least as robust as Post-Norm (no more failed runs, spread over learning rates not larger by > {TOL} "
    "nats) on every seed, nuanced otherwise, naming which of the two failed.",
)
def _c45(ms: dict[str, Metric]) -> Verdict:
    lit_en = (
        "From the sources: the 2017 paper and BERT used Post-Norm; GPT-2 (Radford et al. 2019) moved the norm to "
        "the input of each sub-block, and GPT-3, PaLM, LLaMA 1–3, Mistral, Qwen and DeepSeek are Pre-Norm "
        "(mostly Pre-RMSNorm); Xiong et al. (2020) showed Pre-LN trains without warm-up. Some recent models add "
        "a norm after the sub-layer as well (Gemma 2) or reorder it (OLMo 2), on top of a Pre-Norm-style path."
    )
    lit_zh = (
        "据文献：2017 年原论文和 BERT 用 Post-Norm；GPT-2 把归一化移到每个子层的输入端，GPT-3、PaLM、LLaMA 1–3、"
        "Mistral、Qwen、DeepSeek 都是 Pre-Norm（多为 Pre-RMSNorm）；Xiong 等（2020）证明 Pre-LN 不需要 warm-up。"
        "近期部分模型（Gemma 2、OLMo 2）在 Pre-Norm 式路径之外再在子层输出后加归一化。"
    )
    rows = per_seed(ms, "lr_spread_pre", "lr_spread_post", "failed_pre", "failed_post")
    more_failed = [fa > fb for _, _, fa, fb in rows]
    wider = [a > b + TOL for a, b, _, _ in rows]
    failed = f"{ms['failed_pre'].fmt()} vs {ms['failed_post'].fmt()}"
    spread = f"{ms['lr_spread_pre'].fmt()} vs {ms['lr_spread_post'].fmt()}"
    if not any(more_failed) and not any(wider):
        return Verdict(
            "supported",
            lit_en + " Our grid agrees with the reason: Pre-Norm failed at "
            f"{ms['failed_pre'].fmt()} learning rates, Post-Norm at {ms['failed_post'].fmt()}, and its "
            f"final-loss spread over the rates was not larger by > {TOL} nats ({spread}).",
            lit_zh + f"我们的实验与其原因一致：Pre-Norm 在 {ms['failed_pre'].fmt()} 个学习率上失败，"
            f"Post-Norm 在 {ms['failed_post'].fmt()} 个，且各学习率最终 loss 的极差没有大出 {TOL} nat "
            f"以上（{spread}）。",
        )
    n = len(rows)
    why_en, why_zh = [], []
    if any(more_failed):
        seeds, seeds_zh = (
            ("", "")
            if all(more_failed)
            else (f" on {sum(more_failed)} of {n} seeds", f"（{sum(more_failed)}/{n} 个种子）")
        )
        why_en.append(f"it failed at more learning rates than Post-Norm{seeds} ({failed})")
        why_zh.append(f"它失败的学习率比 Post-Norm 多{seeds_zh}（{failed}）")
    if any(wider):
        seeds, seeds_zh = ("", "") if all(wider) else (f" on {sum(wider)} of {n} seeds", f"（{sum(wider)}/{n} 个种子）")
        why_en.append(
            f"its final-loss spread over the learning rates was larger than Post-Norm's by > {TOL} "
            f"nats{seeds} ({spread})"
        )
        why_zh.append(f"它各学习率最终 loss 的极差比 Post-Norm 大 {TOL} nat 以上{seeds_zh}（{spread}）")
    return Verdict(
        "nuanced",
        lit_en
        + " But in our grid Pre-Norm was not at least as robust as Post-Norm: "
        + " and ".join(why_en)
        + f"; failed runs {failed}.",
        lit_zh + "但在我们的实验中 Pre-Norm 并不比 Post-Norm 更稳健：" + "，且".join(why_zh) + f"；失败次数 {failed}。",
    )
