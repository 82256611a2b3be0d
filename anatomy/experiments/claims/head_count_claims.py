"""§1–§2: the claims judged on the ``head-count`` sweep (head_count.py): C1–C3 (§1) and C12–C14 (§2.3). Each
rule's thresholds are constants written once into the rule text, the reasons and the decision."""

from __future__ import annotations

from anatomy.experiments.claims.head_count import PAIR_CEILING, SPECIALISED
from anatomy.experiments.registry import Metric, Verdict, claim
from anatomy.experiments.rules import Case, Ladder, fmts, seed_verdict

DIFFUSE = 0.8  # C1: a mean normalised entropy at or above this is 'almost uniform'
C1_RULE = Ladder(
    (
        Case(
            "supported",
            f"the single head is almost uniform (entropy ≥ {DIFFUSE}) on both tasks",
            f"单头在两个任务上都几乎均匀（熵 ≥ {DIFFUSE}）",
            lambda lm, pair: lm >= DIFFUSE and pair >= DIFFUSE,
        ),
        Case(
            "nuanced",
            f"the single head is almost uniform (entropy ≥ {DIFFUSE}) on one task only",
            f"单头只在一个任务上几乎均匀（熵 ≥ {DIFFUSE}）",
            lambda lm, pair: (lm >= DIFFUSE) != (pair >= DIFFUSE),
        ),
        Case(
            "refuted",
            f"the single head is below {DIFFUSE} on both tasks",
            f"单头在两个任务上的熵都低于 {DIFFUSE}",
            lambda lm, pair: lm < DIFFUSE and pair < DIFFUSE,
        ),
    )
)


_C1_METRICS = (
    "ent_lm_h1",
    "ent_pair_h1",
    "ent_lm_h4_mean",
    "ent_lm_h4_min",
    "ent_pair_h4_mean",
    "ent_lm_init",
)


@claim(
    "C1-single-head-diffuse",
    experiment="head-count",
    metrics=_C1_METRICS,
    rule_text=C1_RULE.text(
        "The trained single head's mean normalised entropy H/log(n) (rows with ≥ 8 keys on the "
        f"LM, rows t ≥ 3 on the pair task) counts as 'almost uniform' if ≥ {DIFFUSE}."
    ),
)
def _c1(ms: dict[str, Metric]) -> Verdict:
    f = fmts(ms, *_C1_METRICS)
    en = (
        f"Normalised attention entropy of the single head (1 = uniform over the visible keys): {f['ent_lm_h1']} on a "
        f"character LM and {f['ent_pair_h1']} on the ordered-pair task; the heads of the 4-head models give "
        f"{f['ent_lm_h4_mean']} (lowest head {f['ent_lm_h4_min']}) and {f['ent_pair_h4_mean']}; an untrained model "
        f"gives {f['ent_lm_init']}. 'Almost uniform' means ≥ {DIFFUSE}."
    )
    zh = (
        f"单头注意力的归一化熵（1 = 对可见位置均匀分布）：字符语言模型上为 {f['ent_lm_h1']}，有序数对任务上为 "
        f"{f['ent_pair_h1']}；4 头模型各头分别为 {f['ent_lm_h4_mean']}（最低 {f['ent_lm_h4_min']}）和 "
        f"{f['ent_pair_h4_mean']}；未训练模型为 {f['ent_lm_init']}。≥{DIFFUSE} 视为“几乎均匀”。"
    )
    return seed_verdict(ms, ("ent_lm_h1", "ent_pair_h1"), C1_RULE, en, zh)


CEILING_PCT = 100 * PAIR_CEILING  # C2: the accuracy (%) one relation alone can reach
C2_SOLVED, C2_MATCH, C2_BOTH, C2_ONE = 90, 0.9, 1.5, 1.2  # 4-head model solved; h1 ≥ 0.9×h4; > 1.5× / ≤ 1.2× ceiling
C2_RULE = Ladder(
    (
        Case(
            "inconclusive",
            f"the 4-head model stays below {C2_SOLVED}% (nothing to compare)",
            f"四头模型低于 {C2_SOLVED}%（无从比较）",
            lambda a1, a4: a4 < C2_SOLVED,
        ),
        Case(
            "refuted",
            f"the single head reaches ≥ {C2_MATCH:.0%} of the 4-head accuracy",
            f"单头达到四头准确率的 {C2_MATCH:.0%} 以上",
            lambda a1, a4: a1 >= C2_MATCH * a4,
        ),
        Case(
            "nuanced",
            f"the single head exceeds {C2_BOTH * CEILING_PCT:.0f}% (both relations in one distribution, but "
            "learnt worse)",
            f"单头超过 {C2_BOTH * CEILING_PCT:.0f}%（一份分布里有两种关系，但学得更差）",
            lambda a1, a4: a1 > C2_BOTH * CEILING_PCT,
        ),
        Case(
            "supported",
            f"the single head stays ≤ {C2_ONE * CEILING_PCT:.0f}% (one relation only)",
            f"单头不超过 {C2_ONE * CEILING_PCT:.0f}%（只有一种关系）",
            lambda a1, a4: a1 <= C2_ONE * CEILING_PCT,
        ),
    ),
    otherwise_en=f"the single head lies between {C2_ONE * CEILING_PCT:.0f}% and {C2_BOTH * CEILING_PCT:.0f}%",
    otherwise_zh=f"单头介于 {C2_ONE * CEILING_PCT:.0f}% 和 {C2_BOTH * CEILING_PCT:.0f}% 之间",
)


@claim(
    "C2-one-head-one-relation",
    experiment="head-count",
    metrics=("acc_pair_h1", "acc_pair_h4", "pair_h1_mass_t1", "pair_h1_mass_t3", "pair_h1_order_ratio"),
    rule_text=C2_RULE.text(
        "Ordered-pair task, 1-layer models, same steps; one relation alone caps accuracy at "
        f"{CEILING_PCT:.0f}% (the test set's sampling error is ≈ 0.3 points)."
    ),
)
def _c2(ms: dict[str, Metric]) -> Verdict:
    ceil = CEILING_PCT
    a1, a4 = ms["acc_pair_h1"].fmt(), ms["acc_pair_h4"].fmt()
    m1, m3, r = ms["pair_h1_mass_t1"].fmt(), ms["pair_h1_mass_t3"].fmt(), ms["pair_h1_order_ratio"].fmt()
    en = (
        f"On y_t = 10·x(t-1) + x(t-3) (100 classes; chance 1%, either relation alone at most {ceil:.0f}%), one head "
        f"reaches {a1} and four heads {a4} at the same number of steps. The single head puts {m1} of its weight on "
        f"t-1 and {m3} on t-3 (share of t-1: {r}). Above {C2_BOTH * ceil:.0f}% a single attention distribution "
        f"provably carries both relations (unequal weights keep the order); at or below {C2_ONE * ceil:.0f}% it "
        "carries one."
    )
    zh = (
        f"在 y_t = 10·x(t-1) + x(t-3)（100 类；随机 1%，只用一种关系最多 {ceil:.0f}%）上，相同训练步数下单头准确率 "
        f"{a1}，四头 {a4}。单头把 {m1} 的权重放在 t-1、{m3} 放在 t-3（t-1 占比 {r}）。准确率超过 "
        f"{C2_BOTH * ceil:.0f}% 说明一份注意力分布同时承载了两种关系（不相等的权重保留了顺序）；不超过 "
        f"{C2_ONE * ceil:.0f}% 则只承载了一种。"
    )
    lead = {
        "nuanced": (
            "'Never' is wrong: one head does hold both relations, but at equal steps it learns them far "
            "worse than several heads.",
            "“永远不可能”不对：单头确实能同时表达两种关系，但相同步数下学得比多头差得多。",
        ),
        "refuted": ("One head does what several heads do here.", "单头在这里做到了多头能做的事。"),
        "supported": ("The single head stays at the one-relation ceiling.", "单头停在只用一种关系的上限。"),
    }
    return seed_verdict(ms, ("acc_pair_h1", "acc_pair_h4"), C2_RULE, en, zh, lead)


C3_DROP = 0.5  # C3: ablating a specialised head costs at least this share of the accuracy
C3_RULE = Ladder(
    (
        Case(
            "supported",
            f"the 4-head pair model has distinct heads (≥ {SPECIALISED} mass) for offsets 1 and 3 whose "
            f"ablation each costs ≥ {C3_DROP:.0%} of the accuracy, and the 4-head char LM has a "
            f"head with ≥ {SPECIALISED} "
            "mass on the previous character",
            f"四头数对模型的偏移 1 和偏移 3 各有不同的头（≥{SPECIALISED} 的注意力），去掉任一个准确率至少下降 "
            f"{C3_DROP:.0%}，且四头字符模型有一个头在前一个字符上的权重 ≥{SPECIALISED}",
            lambda cov, drop, prev: cov >= 1 and drop >= C3_DROP and prev >= SPECIALISED,
        ),
        Case(
            "refuted",
            "neither specialisation appears",
            "两种专门化都没有出现",
            lambda cov, drop, prev: cov < 1 and prev < SPECIALISED,
        ),
    ),
    otherwise="nuanced",
    otherwise_en="some specialisation appears, but not every condition of 'supported' holds",
    otherwise_zh="出现了部分专门化，但“成立”的条件没有全部满足",
)


_C3_METRICS = (
    "pair_h4_covers",
    "pair_h4_specialised_heads",
    "pair_h4_ablation_min_drop",
    "lm_h4_prev_char_mass",
    "lm_h4_prev_head_ablation_dloss",
)


@claim(
    "C3-heads-specialise",
    experiment="head-count",
    metrics=_C3_METRICS,
    rule_text=C3_RULE.text("A role is attributed only if ablating the head hurts that relation."),
)
def _c3(ms: dict[str, Metric]) -> Verdict:
    f = fmts(ms, *_C3_METRICS)
    en = (
        f"Ordered pairs, 4 heads: distinct heads for offsets 1 and 3 (≥ {SPECIALISED} of their mass) on a fraction "
        f"{f['pair_h4_covers']} of the seeds, {f['pair_h4_specialised_heads']} specialised heads; zeroing the "
        f"offset-1 or offset-3 head costs at least {f['pair_h4_ablation_min_drop']} of the accuracy (relative). Char "
        f"LM, 4 heads: the most 'previous character' head puts {f['lm_h4_prev_char_mass']} of its mass on offset 1, "
        f"and zeroing it raises the loss by {f['lm_h4_prev_head_ablation_dloss']}. Coreference heads cannot be "
        "tested here (no pronouns in these data)."
    )
    zh = (
        f"有序数对、4 头：在 {f['pair_h4_covers']} 的种子上，偏移 1 和偏移 3 各由不同的头负责（≥{SPECIALISED} "
        f"的注意力），专门化的头数 {f['pair_h4_specialised_heads']}；去掉偏移 1 或偏移 3 的头，准确率至少相对下降 "
        f"{f['pair_h4_ablation_min_drop']}。字符语言模型、4 头：最关注“前一个字符”的头在偏移 1 上的权重为 "
        f"{f['lm_h4_prev_char_mass']}，去掉它损失上升 {f['lm_h4_prev_head_ablation_dloss']}。指代关系的头在这些数据上"
        "无法检验（没有代词）。"
    )
    return seed_verdict(ms, ("pair_h4_covers", "pair_h4_ablation_min_drop", "lm_h4_prev_char_mass"), C3_RULE, en, zh)


# =============================================================================================================
# C12–C14: judged on the head-count experiment of head_count.py
# =============================================================================================================

WORSE_NATS, WORSE_POINTS = 0.05, 3  # C12: small d_k 'clearly worse': LM loss (nats) / sentiment accuracy (points)
NEAR_BEST = 0.02  # C12: nats: d_k = 64 this close to the best LM loss
C12_RULE = Ladder(
    (
        Case(
            "supported",
            f"clearly worse on both tasks and d_k = 64 is within {NEAR_BEST} nats of the best LM loss",
            f"两个任务上都明显更差，且 d_k = 64 的 LM 损失与最好值相差不超过 {NEAR_BEST} nat",
            lambda lm_pen, cls_pen, dk64_gap: lm_pen > WORSE_NATS and cls_pen > WORSE_POINTS and dk64_gap <= NEAR_BEST,
        ),
        Case(
            "refuted",
            "clearly worse on neither task",
            "两个任务上都没有明显更差",
            lambda lm_pen, cls_pen, dk64_gap: not lm_pen > WORSE_NATS and not cls_pen > WORSE_POINTS,
        ),
    ),
    otherwise="nuanced",
    otherwise_en="clearly worse on one task only, or d_k = 64 is not near the best",
    otherwise_zh="只在一个任务上明显更差，或 d_k = 64 离最好值较远",
)


_C12_METRICS = (
    "lm_val_h1",
    "lm_val_h2",
    "lm_val_h4",
    "lm_val_h8",
    "cls_acc_h1",
    "cls_acc_h4",
    "cls_acc_h8",
    "lm_small_dk_penalty",
    "cls_small_dk_penalty",
    "lm_dk64_minus_best",
)


@claim(
    "C12-small-dk-degrades",
    experiment="head-count",
    metrics=_C12_METRICS,
    rule_text=C12_RULE.text(
        "d_model = 64, h ∈ {1, 2, 4, 8} (LM) and {1, 4, 8} (sentiment). 'Clearly worse' means "
        f"the mean of d_k ∈ {{16, 8}} loses > {WORSE_NATS} nats (≈ 5% perplexity) against d_k ≥ "
        f"32 on the char LM, or > {WORSE_POINTS} accuracy points on sentiment (above the test "
        "set's sampling error, ≈ 1.1 points at n = 1736)."
    ),
)
def _c12(ms: dict[str, Metric]) -> Verdict:
    f = fmts(ms, *_C12_METRICS)
    en = (
        f"d_model = 64, so d_k = 64, 32, 16, 8 for h = 1, 2, 4, 8. Char-LM validation loss: {f['lm_val_h1']}, "
        f"{f['lm_val_h2']}, {f['lm_val_h4']}, {f['lm_val_h8']}; sentiment accuracy at d_k = 64, 16, 8: "
        f"{f['cls_acc_h1']}, {f['cls_acc_h4']}, {f['cls_acc_h8']}. Penalty of d_k < 32 against d_k ≥ 32: "
        f"{f['lm_small_dk_penalty']} (LM, vs the better of 64 and 32) and {f['cls_small_dk_penalty']} (accuracy, vs "
        f"64); d_k = 64 is {f['lm_dk64_minus_best']} from the best LM loss."
    )
    zh = (
        f"d_model = 64，h = 1、2、4、8 对应 d_k = 64、32、16、8。字符语言模型验证损失：{f['lm_val_h1']}、"
        f"{f['lm_val_h2']}、{f['lm_val_h4']}、{f['lm_val_h8']}；d_k = 64、16、8 时情感分类准确率：{f['cls_acc_h1']}、"
        f"{f['cls_acc_h4']}、{f['cls_acc_h8']}。d_k<32 相对 d_k≥32 "
        f"的损失：{f['lm_small_dk_penalty']}（语言模型，对比 64 与 32 中较好者）和 "
        f"{f['cls_small_dk_penalty']}（准确率，对比 64）；d_k=64 距最好的语言模型损失 {f['lm_dk64_minus_best']}。"
    )
    lead = {
        "refuted": ("Small heads are not worse here.", "这里小维度的头并没有更差。"),
        "supported": ("Heads below d_k = 32 are clearly worse.", "d_k 低于 32 时明显变差。"),
    }
    return seed_verdict(
        ms, ("lm_small_dk_penalty", "cls_small_dk_penalty", "lm_dk64_minus_best"), C12_RULE, en, zh, lead
    )


SLOWER, OVERFITS = 1.1, 2  # C13: step-time ratio h=8/h=1 that is 'slower'; larger train-val gap (points): 'overfits'
C13_RULE = Ladder(
    (
        Case(
            "supported",
            f"a step takes > {SLOWER}× as long and the train–validation gap is > {OVERFITS} points larger",
            f"每步耗时超过 {SLOWER} 倍，且训练-验证差距大 {OVERFITS} 个百分点以上",
            lambda ratio, gap_diff: ratio > SLOWER and gap_diff > OVERFITS,
        ),
        Case(
            "refuted",
            "neither slower nor overfitting more",
            "既不更慢也不更过拟合",
            lambda ratio, gap_diff: not ratio > SLOWER and not gap_diff > OVERFITS,
        ),
    ),
    otherwise="nuanced",
    otherwise_en="one of the two only",
    otherwise_zh="只满足其中之一",
)


_C13_METRICS = (
    "lm_step_ms_h1",
    "lm_step_ms_h8",
    "time_ratio_h8_vs_h1",
    "cls_gap_h1",
    "cls_gap_h8",
    "cls_gap_h8_minus_h1",
    "lm_val_h1",
    "lm_val_h8",
)


@claim(
    "C13-more-heads-slower-overfit",
    experiment="head-count",
    metrics=_C13_METRICS,
    rule_text=C13_RULE.text(
        f"h = 8 vs h = 1 at d_model = 64. 'Slower' if a forward+backward step takes > {SLOWER}× "
        "as long; 'overfits more' if the train–validation accuracy gap on 2000 sentiment "
        f"reviews is > {OVERFITS} points larger."
    ),
)
def _c13(ms: dict[str, Metric]) -> Verdict:
    f = fmts(ms, *_C13_METRICS)
    en = (
        f"At fixed d_model = 64 (same parameter count), a training step takes {f['lm_step_ms_h1']} ms with 1 head "
        f"and {f['lm_step_ms_h8']} ms with 8 (ratio {f['time_ratio_h8_vs_h1']}); per step, the LM reaches "
        f"{f['lm_val_h1']} with 1 head and {f['lm_val_h8']} with 8. On 2000 training reviews the train–validation "
        f"accuracy gap is {f['cls_gap_h1']} with 1 head and {f['cls_gap_h8']} with 8 (difference "
        f"{f['cls_gap_h8_minus_h1']})."
    )
    zh = (
        f"在 d_model = 64 固定（参数量相同）时，1 个头每步训练 {f['lm_step_ms_h1']} ms，8 个头 {f['lm_step_ms_h8']} "
        f"ms（比值 {f['time_ratio_h8_vs_h1']}）；相同步数下语言模型损失 1 头 {f['lm_val_h1']}、8 头 "
        f"{f['lm_val_h8']}。在 2000 条训练评论上，训练集与验证集准确率之差 1 头为 {f['cls_gap_h1']}，8 头为 "
        f"{f['cls_gap_h8']}（差 {f['cls_gap_h8_minus_h1']}）。"
    )
    lead = {"nuanced": ("Only one half holds.", "只有一半成立。")}
    return seed_verdict(ms, ("time_ratio_h8_vs_h1", "cls_gap_h8_minus_h1"), C13_RULE, en, zh, lead)


@claim(
    "C14-four-vs-eight-heads",
    experiment="head-count",
    metrics=("cls_acc_h4", "cls_acc_h8", "cls_diff_h8_minus_h4"),
    rule_text="Accuracy difference (8 heads − 4 heads) over seeds: supported if |mean| < 1 point and the 95% "
    "interval lies within ±3 points; refuted if |mean| ≥ 1 point and the interval excludes 0; "
    "inconclusive otherwise.",
)
def _c14(ms: dict[str, Metric]) -> Verdict:
    d = ms["cls_diff_h8_minus_h4"]
    lo, hi = d.ci95
    a4, a8 = ms["cls_acc_h4"].fmt(), ms["cls_acc_h8"].fmt()
    en = (
        f"Sentiment (zh, 2000 training reviews, d_model = 64): 4 heads {a4}, 8 heads {a8}; difference {d.fmt()} (95% "
        f"interval {lo:.2f} … {hi:.2f} points over {d.n} seed(s))."
    )
    zh = (
        f"情感分类（中文，2000 条训练评论，d_model = 64）：4 头 {a4}，8 头 {a8}；差 {d.fmt()}（{d.n} 个种子的 95% "
        f"区间 {lo:.2f} … {hi:.2f} 个百分点）。"
    )
    if abs(d.mean) < 1 and lo > -3 and hi < 3:
        return Verdict("supported", en, zh)
    if abs(d.mean) >= 1 and (lo > 0 or hi < 0):
        return Verdict("refuted", en, zh)
    return Verdict(
        "inconclusive",
        en + " The interval is too wide to tell a < 1 point difference.",
        zh + "区间太宽，无法判断差距是否小于 1 个点。",
    )
