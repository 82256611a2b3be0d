"""§2.4: the claims judged on the ``mask-fills`` experiment (masks.py): C17–C20. Each rule's thresholds are the
constants below, written once into the rule text, the reasons and the decision."""

from __future__ import annotations

from anatomy.experiments.registry import Metric, Verdict, claim
from anatomy.experiments.rules import Case, Ladder, fmts, num, seed_verdict

HIDDEN = 1e-6  # C17-C20: probability (or logit change) at or below this on a hidden key is "≈ 0"
EXACT_ZERO = 1e-12  # C19: a weight above the diagonal at or below this is 0
RENORM_DIFF = 1e-9  # C18: zeroing + renormalising differs from masking when output or gradient move by more
AGREE = 0.99  # C20: the -inf and -1e9 twins' greedy generations agreeing on fewer tokens than this differ
C17_RULE = Ladder(
    (
        Case(
            "refuted",
            f"-1e9 leaves > {num(HIDDEN)} on a hidden key in float32",
            f"float32 下 -1e9 在被遮位置留下 > {num(HIDDEN)}",
            lambda l32, lbf, err16: l32 > HIDDEN,
        ),
        Case(
            "supported",
            f"≤ {num(HIDDEN)} in float32 and bfloat16 and float16 accepts the value",
            f"float32 和 bfloat16 下都 ≤ {num(HIDDEN)}，且 float16 能存下这个值",
            lambda l32, lbf, err16: lbf <= HIDDEN and err16 == 0,
        ),
    ),
    otherwise="nuanced",
    otherwise_en="it holds only in some dtypes",
    otherwise_zh="只在部分数据类型下成立",
)


@claim(
    "C17-padding-large-negative",
    experiment="mask-fills",
    metrics=("leak_1e9_fp32", "leak_1e9_bf16", "fp16_1e9_error", "leak_1e4_fp16", "full_row_1e9_pad_mass"),
    rule_text=C17_RULE.text("Softmax computed in each dtype on realistic logits (std 4)."),
)
def _c17(ms: dict[str, Metric]) -> Verdict:
    f = fmts(ms, "leak_1e9_fp32", "leak_1e9_bf16", "leak_1e4_fp16", "full_row_1e9_pad_mass")
    err = all(v == 1 for v in ms["fp16_1e9_error"].values)
    en = (
        f"With -1e9 before softmax, the largest probability left on a hidden key is {f['leak_1e9_fp32']} in float32 "
        f"and {f['leak_1e9_bf16']} in bfloat16 (rows with at least one real key). "
        + (
            "In float16 -1e9 cannot be stored: masked_fill raises an overflow error (-1e4 gives "
            f"{f['leak_1e4_fp16']}). "
            if err
            else f"float16 with -1e4: {f['leak_1e4_fp16']}. "
        )
        + f"A row that sees no real key puts {f['full_row_1e9_pad_mass']} of its weight on the padding (uniform)."
    )
    zh = (
        f"在 softmax 之前填 -1e9，有真实 key 的行留在被遮位置上的最大概率：float32 为 {f['leak_1e9_fp32']}，bfloat16 "
        f"为 {f['leak_1e9_bf16']}。"
        + (
            f"float16 存不下 -1e9：masked_fill 直接报溢出错误（-1e4 时为 {f['leak_1e4_fp16']}）。"
            if err
            else f"float16 用 -1e4：{f['leak_1e4_fp16']}。"
        )
        + f"一整行都被遮住时，{f['full_row_1e9_pad_mass']} 的权重落在 padding 上（均匀分布）。"
    )
    return seed_verdict(ms, ("leak_1e9_fp32", "leak_1e9_bf16", "fp16_1e9_error"), C17_RULE, en, zh)


C18_RULE = Ladder(
    (
        Case(
            "supported",
            "both zeroing after softmax and zeroing + renormalising differ (output or visible-logit "
            f"gradient, > {num(HIDDEN)} / > {num(RENORM_DIFF)})",
            f"softmax 之后置零、置零再归一化都与之不同（输出或可见位置梯度，> {num(HIDDEN)} / > {num(RENORM_DIFF)}）",
            lambda af, ag, rf, rg: (af > HIDDEN or ag > HIDDEN) and (rf > RENORM_DIFF or rg > RENORM_DIFF),
        ),
        Case(
            "nuanced",
            f"only the un-renormalised version differs (> {num(HIDDEN)})",
            f"只有不重新归一化的做法不同（> {num(HIDDEN)}）",
            lambda af, ag, rf, rg: af > HIDDEN or ag > HIDDEN,
        ),
    ),
    otherwise="refuted",
    otherwise_en="neither differs",
    otherwise_zh="两者都没有差别",
)


_C18_METRICS = (
    "c18_after_fwd",
    "c18_after_rowsum",
    "c18_after_grad_visible",
    "c18_after_grad_hidden",
    "c18_renorm_fwd",
    "c18_renorm_grad_visible",
    "c18_renorm_grad_hidden",
    "causal_future_leak_mask_after_softmax",
)


@claim(
    "C18-zeroing-after-softmax",
    experiment="mask-fills",
    metrics=_C18_METRICS,
    rule_text=C18_RULE.text("float64, against masking before softmax."),
)
def _c18(ms: dict[str, Metric]) -> Verdict:
    f = fmts(ms, *_C18_METRICS)
    en = (
        f"float64. Zeroing after softmax (no renormalisation): rows sum to {f['c18_after_rowsum']}, the output "
        f"differs by {f['c18_after_fwd']}, the gradient on visible logits by {f['c18_after_grad_visible']} and the "
        f"hidden logits still receive {f['c18_after_grad_hidden']}; as a causal mask it lets a future token move "
        f"earlier outputs by {f['causal_future_leak_mask_after_softmax']}. Zeroing and renormalising the row: output "
        f"{f['c18_renorm_fwd']}, visible gradient {f['c18_renorm_grad_visible']}, hidden gradient "
        f"{f['c18_renorm_grad_hidden']} — equivalent to masking before softmax, so the post's gradient explanation "
        "does not hold for it."
    )
    zh = (
        f"float64。softmax 之后置零（不重新归一化）：每行之和为 {f['c18_after_rowsum']}，输出相差 "
        f"{f['c18_after_fwd']}，可见位置的梯度相差 {f['c18_after_grad_visible']}，被遮位置仍得到 "
        f"{f['c18_after_grad_hidden']} 的梯度；用作因果 mask 时未来 token 会让前面的输出变化 "
        f"{f['causal_future_leak_mask_after_softmax']}。置零后再按行归一化：输出相差 {f['c18_renorm_fwd']}，可见梯度 "
        f"{f['c18_renorm_grad_visible']}，被遮梯度 {f['c18_renorm_grad_hidden']}——与 softmax "
        "之前遮盖等价，原文关于梯度的解释对它不成立。"
    )
    return seed_verdict(
        ms, ("c18_after_fwd", "c18_after_grad_visible", "c18_renorm_fwd", "c18_renorm_grad_visible"), C18_RULE, en, zh
    )


C19_RULE = Ladder(
    (
        Case(
            "supported",
            f"earlier logits move by ≤ {num(HIDDEN)} and every weight above the diagonal is 0 (≤ {num(EXACT_ZERO)})",
            f"前面位置的 logits 变化 ≤ {num(HIDDEN)}，且对角线以上的权重都为 0（≤ {num(EXACT_ZERO)}）",
            lambda leak_, upper: leak_ <= HIDDEN and upper <= EXACT_ZERO,
        ),
    ),
    otherwise="refuted",
    otherwise_en="the future leaks into earlier positions",
    otherwise_zh="未来信息泄漏到了前面的位置",
)


_C19_METRICS = (
    "causal_future_leak",
    "causal_upper_weight_max",
    "causal_future_leak_causal_off_by_one",
    "causal_future_leak_mask_after_softmax",
)


@claim(
    "C19-causal-mask",
    experiment="mask-fills",
    metrics=_C19_METRICS,
    rule_text=C19_RULE.text("Future-token perturbation on a trained LM."),
)
def _c19(ms: dict[str, Metric]) -> Verdict:
    f = fmts(ms, *_C19_METRICS)
    en = (
        "A trained 2-layer LM with the library's causal mask (-inf above the diagonal, before softmax): changing the "
        f"last token moves earlier logits by {f['causal_future_leak']}, and the largest weight above the diagonal is "
        f"{f['causal_upper_weight_max']}. For contrast, a diagonal shifted by one leaks "
        f"{f['causal_future_leak_causal_off_by_one']}, and zeroing after softmax leaks "
        f"{f['causal_future_leak_mask_after_softmax']}."
    )
    zh = (
        "训练好的 2 层语言模型使用本库的因果 mask（softmax 之前把对角线以上置为 -inf）：改变最后一个 token，前面位"
        f"置的 logits 变化 {f['causal_future_leak']}，对角线以上的最大权重为 "
        f"{f['causal_upper_weight_max']}。对照：对角线错一位时泄漏 "
        f"{f['causal_future_leak_causal_off_by_one']}，softmax 之后再置零时泄漏 "
        f"{f['causal_future_leak_mask_after_softmax']}。"
    )
    return seed_verdict(ms, ("causal_future_leak", "causal_upper_weight_max"), C19_RULE, en, zh)


C20_RULE = Ladder(
    (
        Case(
            "supported",
            f"-1e9 leaves > {num(HIDDEN)} on hidden keys in float32 or the greedy generations of the -inf "
            f"and -1e9 twins (same seed, same batches, same kernel) agree on < {AGREE:.0%} of tokens",
            f"float32 下 -1e9 在被遮位置留下 > {num(HIDDEN)}，"
            f"或 -inf 与 -1e9 两个孪生模型的贪心生成一致率 < {AGREE:.0%}",
            lambda leak32, pdiff, agree: leak32 > HIDDEN or agree < AGREE,
        ),
        Case(
            "refuted",
            "nothing leaks and the twins end bit-identical with identical generations",
            "没有泄漏，两个孪生模型参数逐位相同、生成完全一致",
            lambda leak32, pdiff, agree: pdiff == 0 and agree == 1,
        ),
    ),
    otherwise="nuanced",
    otherwise_en=f"nothing leaks beyond the threshold and the generations agree on ≥ {AGREE:.0%} "
    "of tokens, but the twins are not identical",
    otherwise_zh=f"泄漏未超过阈值、生成一致率 ≥ {AGREE:.0%}，但两个孪生模型并不完全相同",
)


_C20_QUOTED = (
    "leak_1e9_fp32",
    "c20_param_maxdiff",
    "c20_gen_agreement",
    "c20_val_diff",
    "leftpad_nan_inf_noguard",
    "leftpad_nan_1e9",
    "leftpad_nan_library",
    "leftpad_realdiff_1e9",
)


@claim(
    "C20-mask-fill",
    experiment="mask-fills",
    metrics=(*_C20_QUOTED, "fp16_1e9_error"),
    rule_text=C20_RULE.text(),
)
def _c20(ms: dict[str, Metric]) -> Verdict:
    f = fmts(ms, *_C20_QUOTED)
    err = all(v == 1 for v in ms["fp16_1e9_error"].values)
    en = (
        f"-1e9 leaves {f['leak_1e9_fp32']} probability on future keys in float32. Two LMs trained from one seed on "
        "the same batches, one with -inf and one with -1e9, end with weights that differ by at most "
        f"{f['c20_param_maxdiff']}, validation losses that differ by {f['c20_val_diff']}, and greedy generations "
        f"that agree on {f['c20_gen_agreement']} of the tokens. With left padding, -inf without a guard makes "
        f"{f['leftpad_nan_inf_noguard']} of the real-token logits NaN, -1e9 {f['leftpad_nan_1e9']} (real tokens "
        f"unchanged to {f['leftpad_realdiff_1e9']}), the library (-inf + guard) {f['leftpad_nan_library']}."
        + (" In float16, -1e9 cannot even be written (overflow error)." if err else "")
    )
    zh = (
        f"float32 下 -1e9 留在未来位置上的概率为 {f['leak_1e9_fp32']}。同一种子、相同批次训练两个语言模型，一个用 "
        f"-inf、一个用 -1e9：权重最大相差 {f['c20_param_maxdiff']}，验证损失相差 {f['c20_val_diff']}，贪心生成的 "
        f"token 有 {f['c20_gen_agreement']} 相同。左侧 padding 时，-inf 且不处理全遮行会使 "
        f"{f['leftpad_nan_inf_noguard']} 的真实 token logits 变成 NaN，-1e9 为 {f['leftpad_nan_1e9']}（真实 token "
        f"与单独计算相差 {f['leftpad_realdiff_1e9']}），本库（-inf + 保护）为 {f['leftpad_nan_library']}。"
        + ("float16 下根本写不进 -1e9（溢出报错）。" if err else "")
    )
    return seed_verdict(ms, ("leak_1e9_fp32", "c20_param_maxdiff", "c20_gen_agreement"), C20_RULE, en, zh)
