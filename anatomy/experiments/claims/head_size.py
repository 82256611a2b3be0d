"""§2.3: head count and head size (claims C12–C14), judged on ``head-count`` (head_count.py): the head-count sweep
at d_model = 64."""

from __future__ import annotations

from anatomy.experiments.registry import Verdict, claim
from anatomy.experiments.rules import Case, Ladder, seed_verdict

# =============================================================================================================
# C12–C14: judged on the head-count experiment of head_count.py
# =============================================================================================================

WORSE_NATS, WORSE_POINTS = 0.05, 3  # C12: small d_k 'clearly worse': LM loss (nats) / sentiment accuracy (points)
NEAR_BEST = 0.02  # C12: nats: d_k = 64 this close to the best LM loss
C12_RULE = Ladder((
    Case("supported", f"clearly worse on both tasks and d_k = 64 is within {NEAR_BEST} nats of the best LM loss",
         f"两个任务上都明显更差，且 d_k = 64 的 LM 损失与最好值相差不超过 {NEAR_BEST} nat",
         lambda lm_pen, cls_pen, dk64_gap: lm_pen > WORSE_NATS and cls_pen > WORSE_POINTS and dk64_gap <= NEAR_BEST),
    Case("refuted", "clearly worse on neither task", "两个任务上都没有明显更差",
         lambda lm_pen, cls_pen, dk64_gap: not lm_pen > WORSE_NATS and not cls_pen > WORSE_POINTS),
), otherwise="nuanced", otherwise_en="clearly worse on one task only, or d_k = 64 is not near the best",
   otherwise_zh="只在一个任务上明显更差，或 d_k = 64 离最好值较远")


def _c12(ms) -> Verdict:
    f = {k: ms[k].fmt() for k in ("lm_val_h1", "lm_val_h2", "lm_val_h4", "lm_val_h8", "cls_acc_h1", "cls_acc_h4",
                                  "cls_acc_h8", "lm_small_dk_penalty", "cls_small_dk_penalty", "lm_dk64_minus_best")}
    en = (f"d_model = 64, so d_k = 64, 32, 16, 8 for h = 1, 2, 4, 8. Char-LM validation loss: {f['lm_val_h1']}, "
          f"{f['lm_val_h2']}, {f['lm_val_h4']}, {f['lm_val_h8']}; sentiment accuracy at d_k = 64, 16, 8: "
          f"{f['cls_acc_h1']}, {f['cls_acc_h4']}, {f['cls_acc_h8']}. Penalty of d_k < 32 against d_k ≥ 32: "
          f"{f['lm_small_dk_penalty']} (LM, vs the better of 64 and 32) and {f['cls_small_dk_penalty']} (accuracy, "
          f"vs 64); d_k = 64 is {f['lm_dk64_minus_best']} from the best LM loss.")
    zh = (f"d_model = 64，h = 1、2、4、8 对应 d_k = 64、32、16、8。字符语言模型验证损失：{f['lm_val_h1']}、"
          f"{f['lm_val_h2']}、"
          f"{f['lm_val_h4']}、{f['lm_val_h8']}；d_k = 64、16、8 时情感分类准确率：{f['cls_acc_h1']}、"
          f"{f['cls_acc_h4']}、"
          f"{f['cls_acc_h8']}。d_k<32 相对 d_k≥32 的损失：{f['lm_small_dk_penalty']}（语言模型，对比 64 与 32 中较好"
          "者）和 "
          f"{f['cls_small_dk_penalty']}（准确率，对比 64）；d_k=64 距最好的语言模型损失 {f['lm_dk64_minus_best']}。")
    lead = {"refuted": ("Small heads are not worse here.", "这里小维度的头并没有更差。"),
            "supported": ("Heads below d_k = 32 are clearly worse.", "d_k 低于 32 时明显变差。")}
    return seed_verdict(ms, ("lm_small_dk_penalty", "cls_small_dk_penalty", "lm_dk64_minus_best"), C12_RULE, en, zh,
                        lead)


claim("C12-small-dk-degrades", section="§2.3",
      zh="d_k如果低于32每个头能表达的信息量太有限整体效果会出现明显退化d_k64是各方面都比较均衡的配置",
      en="d_k below 32 clearly degrades results; d_k = 64 is the balanced choice.",
      experiment="head-count",
      metrics=("lm_val_h1", "lm_val_h2", "lm_val_h4", "lm_val_h8", "cls_acc_h1", "cls_acc_h4", "cls_acc_h8",
               "lm_small_dk_penalty", "cls_small_dk_penalty", "lm_dk64_minus_best"),
      rule=_c12,
      rule_text=C12_RULE.text("d_model = 64, h ∈ {1, 2, 4, 8} (LM) and {1, 4, 8} (sentiment). 'Clearly worse' means "
                              f"the mean of d_k ∈ {{16, 8}} loses > {WORSE_NATS} nats (≈ 5% perplexity) against "
                              f"d_k ≥ 32 on the char LM, or > {WORSE_POINTS} accuracy points on sentiment (above the "
                              "test set's sampling error, ≈ 1.1 points at n = 1736)."))


SLOWER, OVERFITS = 1.1, 2  # C13: step-time ratio h=8/h=1 that is 'slower'; larger train-val gap (points): 'overfits'
C13_RULE = Ladder((
    Case("supported", f"a step takes > {SLOWER}× as long and the train–validation gap is > {OVERFITS} points larger",
         f"每步耗时超过 {SLOWER} 倍，且训练-验证差距大 {OVERFITS} 个百分点以上",
         lambda ratio, gap_diff: ratio > SLOWER and gap_diff > OVERFITS),
    Case("refuted", "neither slower nor overfitting more", "既不更慢也不更过拟合",
         lambda ratio, gap_diff: not ratio > SLOWER and not gap_diff > OVERFITS),
), otherwise="nuanced", otherwise_en="one of the two only", otherwise_zh="只满足其中之一")


def _c13(ms) -> Verdict:
    f = {k: ms[k].fmt() for k in ("lm_step_ms_h1", "lm_step_ms_h8", "time_ratio_h8_vs_h1", "cls_gap_h1",
                                  "cls_gap_h8", "cls_gap_h8_minus_h1", "lm_val_h1", "lm_val_h8")}
    en = (f"At fixed d_model = 64 (same parameter count), a training step takes {f['lm_step_ms_h1']} ms with 1 head "
          f"and {f['lm_step_ms_h8']} ms with 8 (ratio {f['time_ratio_h8_vs_h1']}); per step, the LM reaches "
          f"{f['lm_val_h1']} with 1 head and {f['lm_val_h8']} with 8. On 2000 training reviews the train–validation "
          f"accuracy gap is {f['cls_gap_h1']} with 1 head and {f['cls_gap_h8']} with 8 (difference "
          f"{f['cls_gap_h8_minus_h1']}).")
    zh = (f"在 d_model = 64 固定（参数量相同）时，1 个头每步训练 {f['lm_step_ms_h1']} ms，8 个头 {f['lm_step_ms_h8']}"
          " ms"
          f"（比值 {f['time_ratio_h8_vs_h1']}）；相同步数下语言模型损失 1 头 {f['lm_val_h1']}、8 头 {f['lm_val_h8']}。"
          f"在 2000 条训练评论上，训练集与验证集准确率之差 1 头为 {f['cls_gap_h1']}，8 头为 {f['cls_gap_h8']}（差 "
          f"{f['cls_gap_h8_minus_h1']}）。")
    lead = {"nuanced": ("Only one half holds.", "只有一半成立。")}
    return seed_verdict(ms, ("time_ratio_h8_vs_h1", "cls_gap_h8_minus_h1"), C13_RULE, en, zh, lead)


claim("C13-more-heads-slower-overfit", section="§2.3",
      zh="头数增多意味着每个头的维度变小…但同时训练会更慢对小数据集也更容易过拟合",
      en="More heads make training slower and overfit small data sets more.",
      experiment="head-count",
      metrics=("lm_step_ms_h1", "lm_step_ms_h8", "time_ratio_h8_vs_h1", "cls_gap_h1", "cls_gap_h8",
               "cls_gap_h8_minus_h1", "lm_val_h1", "lm_val_h8"),
      rule=_c13,
      rule_text=C13_RULE.text(f"h = 8 vs h = 1 at d_model = 64. 'Slower' if a forward+backward step takes > {SLOWER}× "
                              f"as long; 'overfits more' if the train–validation accuracy gap on 2000 sentiment "
                              f"reviews is > {OVERFITS} points larger."))


def _c14(ms) -> Verdict:
    d = ms["cls_diff_h8_minus_h4"]
    lo, hi = d.ci95
    a4, a8 = ms["cls_acc_h4"].fmt(), ms["cls_acc_h8"].fmt()
    en = (f"Sentiment (zh, 2000 training reviews, d_model = 64): 4 heads {a4}, 8 heads {a8}; difference "
          f"{d.fmt()} (95% interval {lo:.2f} … {hi:.2f} points over {d.n} seed(s)).")
    zh = (f"情感分类（中文，2000 条训练评论，d_model = 64）：4 头 {a4}，8 头 {a8}；差 {d.fmt()}（{d.n} 个种子的 95% "
          "区间 "
          f"{lo:.2f} … {hi:.2f} 个百分点）。")
    if abs(d.mean) < 1 and lo > -3 and hi < 3:
        return Verdict("supported", en, zh)
    if abs(d.mean) >= 1 and (lo > 0 or hi < 0):
        return Verdict("refuted", en, zh)
    return Verdict("inconclusive", en + " The interval is too wide to tell a < 1 point difference.",
                   zh + "区间太宽，无法判断差距是否小于 1 个点。")


claim("C14-four-vs-eight-heads", section="§2.3",
      zh="我在一个小规模文本分类任务里对比过8头还是4头差距不到1个点",
      en="On a small text-classification task, 4 and 8 heads differ by less than one accuracy point.",
      experiment="head-count",
      metrics=("cls_acc_h4", "cls_acc_h8", "cls_diff_h8_minus_h4"),
      rule=_c14,
      rule_text="Accuracy difference (8 heads − 4 heads) over seeds: supported if |mean| < 1 point and the 95% "
                "interval lies within ±3 points; refuted if |mean| ≥ 1 point and the interval excludes 0; "
                "inconclusive otherwise.")
