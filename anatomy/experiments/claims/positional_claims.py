"""§3: the claims judged on the ``pe-lm`` experiment (positional.py): C21, C22, C27, C29, C30, C31. Each rule's
thresholds are the constants below, written once into the rule text, the reasons and the decision."""

from __future__ import annotations

from anatomy.experiments.registry import Metric, Verdict, claim
from anatomy.experiments.rules import count_seeds, differences, fmt_count, fmt_values, num, per_seed, setting

TOL_LOSS = 0.05  # nats: "about the same loss"
EXACT = 1e-9  # C21, C27: float64 relative error below this is exact (order-blind, a fixed rotation)
MOVED = 1e-6  # C21: a change of the last logits above this: the causal decoder sees the order
GAIN = 0.2  # C21: share of the learnable gain recovered without PE that shows the causal mask leaks order
OFFSET_R2 = 0.9  # C27: R² of the layer-0 scores explained by the offset alone that counts as "relative"
EXTRAPOLATES, FAILS = 0.1, 0.5  # C29, C30: share of the learnt gain lost past T: extrapolates / does not


# --- C21 ------------------------------------------------------------------------------------------------------


@claim(
    "C21-attention-order-blind",
    experiment="pe-lm",
    metrics=(
        "nope_equivariance_err",
        "wo_da_ni_diff_nope",
        "wo_da_ni_diff_sinusoidal",
        "causal_nope_order_diff",
        "nope_gain",
    ),
    rule_text="Exact float64 tests on untrained models plus a trained causal LM without PE. Refuted if a "
    f"bidirectional encoder without PE is not permutation-equivariant (relative error ≥ {num(EXACT)}); "
    "supported if it is and a causal decoder without PE is order-blind too (prefix reordering changes "
    f"nothing and training recovers < {GAIN:.0%} of the learnable gain on the lag-2 task); nuanced if the "
    f"encoder is blind but the causal decoder is not (reordering changes its logits by > {num(MOVED)} and "
    f"it recovers > {GAIN:.0%} of the gain); otherwise inconclusive.",
)
def _c21(ms: dict[str, Metric]) -> Verdict:
    eq, pair, pair_pe = ms["nope_equivariance_err"], ms["wo_da_ni_diff_nope"], ms["wo_da_ni_diff_sinusoidal"]
    causal, gain = ms["causal_nope_order_diff"], ms["nope_gain"]
    blind, n = count_seeds(ms, ("nope_equivariance_err", "wo_da_ni_diff_nope"), lambda e, p: e < EXACT and p < EXACT)
    if blind == 0:
        return Verdict(
            "refuted",
            "Self-attention without positions is not order-blind here: permuting the input "
            f"changes the output by {eq.fmt()} (relative).",
            f"没有位置编码时自注意力并非对词序不敏感：打乱输入后输出相对变化 {eq.fmt()}。",
        )
    if blind < n:
        return Verdict(
            "inconclusive",
            f"Order-blindness held on {blind} of {n} seeds.",
            f"只有 {blind}/{n} 个随机种子上满足词序不变性。",
        )
    leak, _ = count_seeds(ms, ("causal_nope_order_diff", "nope_gain"), lambda c, gn: c > MOVED and gn > GAIN)
    head_en = (
        "Without a causal mask the post is exactly right: permuting the tokens only permutes the outputs (error "
        f"{eq.fmt()}), and 我打你 / 你打我 give each word the same vector ({pair.fmt()}; with sinusoidal PE "
        f"{pair_pe.fmt()})."
    )
    head_zh = (
        f"没有因果 mask 时原文完全正确：打乱 token 只会打乱输出（误差 {eq.fmt()}），“我打你”与“你打我”中每个词的"
        f"向量相同（{pair.fmt()}；加正弦位置编码后为 {pair_pe.fmt()}）。"
    )
    if leak == n:
        return Verdict(
            "nuanced",
            head_en + " But a causal decoder without PE is not blind: reordering the prefix "
            f"changes the last logits by {causal.fmt()}, and trained without any PE it recovered "
            f"{gain.fmt()} of the learnable gain on a task that needs the token two places back — the mask "
            "itself leaks order.",
            head_zh + "但不带位置编码的因果解码器并不“看不见”顺序：改变前缀顺序后最后一个位置的 logits 变化"
            " "
            f"{causal.fmt()}；在需要“前两个位置的 token”的任务上，完全不加位置编码训练仍获得了可学习收益的 "
            f"{gain.fmt()}——因果 mask 本身泄露了顺序。",
        )
    if leak == 0:
        return Verdict(
            "supported",
            head_en + f" Even the causal model without PE stayed near chance on the order task (gain {gain.fmt()}).",
            head_zh + f"即使是不加位置编码的因果模型，在顺序任务上也接近随机（收益 {gain.fmt()}）。",
        )
    return Verdict(
        "inconclusive",
        head_en + f" Whether the causal mask leaks order differs between seeds ({leak}/{n}).",
        head_zh + f"因果 mask 是否泄露顺序在不同种子上不一致（{leak}/{n}）。",
    )


# --- C22 ------------------------------------------------------------------------------------------------------


@claim(
    "C22-add-not-concat",
    experiment="pe-lm",
    metrics=("in_sinusoidal", "in_concat", "concat_params_ratio", "train_steps"),
    rule_text="Same LM and data, sinusoidal PE added vs concatenated into the last D/2 features (same width). "
    f"Supported if adding is no worse than concatenating by more than {TOL_LOSS} nats of loss inside the "
    "training length on every seed; refuted if it is worse by more on every seed; otherwise inconclusive. "
    "The cost side is the parameter ratio of a concat model that keeps all D token features (width 2D).",
)
def _c22(ms: dict[str, Metric]) -> Verdict:
    rows = per_seed(ms, "in_sinusoidal", "in_concat")
    diffs = [a - c for a, c in rows]
    ratio = ms["concat_params_ratio"]
    d = fmt_values(diffs, " nats")
    if all(x <= TOL_LOSS for x in diffs):
        return Verdict(
            "supported",
            f"At the same width and after {fmt_count(ms['train_steps'])} steps, adding the "
            f"position reached {ms['in_sinusoidal'].fmt()} vs {ms['in_concat'].fmt()} for concatenation "
            f"(add − concat = {d}); concatenating while keeping every token feature means a model with "
            f"{ratio.fmt()}× the parameters.",
            f"同样宽度下，相加得到 {ms['in_sinusoidal'].fmt()}，拼接得到 {ms['in_concat'].fmt()}"
            f"（相加 − 拼接 = {d}）；若拼接时保留全部词向量维度，参数量是 {ratio.fmt()} 倍。",
        )
    if all(x > TOL_LOSS for x in diffs):
        return Verdict(
            "refuted",
            f"After {fmt_count(ms['train_steps'])} steps, adding was worse than concatenating at "
            f"the same width by {d} ({ms['in_sinusoidal'].fmt()} vs {ms['in_concat'].fmt()}), although "
            "concatenation left the token only half of the features (keeping all of them would cost "
            f"{ratio.fmt()}× the parameters).",
            f"训练 {fmt_count(ms['train_steps'])} 步后，同样宽度下相加比拼接差 {d}（"
            f"{ms['in_sinusoidal'].fmt()} 对 {ms['in_concat'].fmt()}），尽管拼接只给词向量留了一半维度"
            f"（保留全部维度的参数量是 {ratio.fmt()} 倍）。",
        )
    return Verdict(
        "inconclusive",
        f"Add − concat = {d}: the seeds disagree about a {TOL_LOSS} nat margin.",
        f"相加 − 拼接 = {d}：各种子在 {TOL_LOSS} nat 的容差上不一致。",
    )


# --- C27 ------------------------------------------------------------------------------------------------------


@claim(
    "C27-relative-by-rotation",
    experiment="pe-lm",
    metrics=(
        "rotation_residual",
        "dot_shift_spread",
        "offset_r2_sinusoidal",
        "offset_r2_learned",
        "offset_r2_rope",
        "offset_r2_alibi",
    ),
    rule_text=f"Refuted if R_k·PE(p) ≠ PE(p+k) or PE(p)·PE(p+k) varies with p (float64, > {num(EXACT)}). Otherwise "
    "the 'relative position for free' half is judged on the trained sinusoidal LM: layer-0 scores of a "
    f"constant-token input, R² explained by the offset i−j alone; supported if ≥ {OFFSET_R2} on every "
    f"seed, nuanced if < {OFFSET_R2} on every seed, inconclusive if the seeds disagree.",
)
def _c27(ms: dict[str, Metric]) -> Verdict:
    rot, spread = ms["rotation_residual"], ms["dot_shift_spread"]
    r2, r2_rope = ms["offset_r2_sinusoidal"], ms["offset_r2_rope"]
    if max(rot.values) > EXACT or max(spread.values) > EXACT:
        return Verdict(
            "refuted",
            f"PE(p+k) is not a fixed rotation of PE(p): residual {rot.fmt()} (above {num(EXACT)}).",
            f"PE(p+k) 并不是 PE(p) 的固定旋转：残差 {rot.fmt()}（超过 {num(EXACT)}）。",
        )
    algebra_en = (
        f"The algebra holds exactly: R_k·PE(p) = PE(p+k) to {rot.fmt()}, and PE(p)·PE(p+k) depends on k "
        f"alone (spread {spread.fmt()})."
    )
    algebra_zh = (
        f"代数部分严格成立：R_k·PE(p) 与 PE(p+k) 相差 {rot.fmt()}，PE(p)·PE(p+k) 只依赖 k（离散度 {spread.fmt()}）。"
    )
    hits, n = count_seeds(ms, ("offset_r2_sinusoidal",), lambda v: v >= OFFSET_R2)
    if hits == n:
        return Verdict(
            "supported",
            algebra_en + " And the trained model's layer-0 scores are mostly a function of the "
            f"offset (R² = {r2.fmt()}).",
            algebra_zh + f"训练后第 0 层的注意力分数也主要由相对距离决定（R² = {r2.fmt()}）。",
        )
    if hits == 0:
        return Verdict(
            "nuanced",
            algebra_en + " But attention does not get relative position for free: after the "
            "token is added, the LayerNorm and W_q, W_k of the trained model make layer-0 scores only "
            f"partly a function of the offset (R² = {r2.fmt()}, vs {r2_rope.fmt()} for RoPE, which applies "
            "the rotation inside attention).",
            algebra_zh + "但注意力并不能“免费”得到相对位置：与词向量相加、经过 LayerNorm 和 W_q、W_k 后，训"
            "练好的"
            f"模型第 0 层分数只有一部分由相对距离解释（R² = {r2.fmt()}；RoPE 把旋转放进注意力内部，为 "
            f"{r2_rope.fmt()}）。",
        )
    return Verdict(
        "inconclusive",
        algebra_en + f" Whether the trained scores follow the offset differs between seeds (R² = {r2.fmt()}).",
        algebra_zh + f"训练后的分数是否只看相对距离在各种子间不一致（R² = {r2.fmt()}）。",
    )


# --- C29, C30, C31 --------------------------------------------------------------------------------------------


@claim(
    "C29-sinusoidal-extrapolation",
    experiment="pe-lm",
    metrics=(
        "train_length",
        "in_sinusoidal",
        "past_sinusoidal",
        "deg_sinusoidal",
        "deg_alibi",
        "deg_rope",
        "deg_t5",
        "deg_shaw",
        "deg_none",
        "uniform",
        "floor",
    ),
    rule_text="deg = (loss beyond T − loss inside T) / (ln V − loss inside T): the share of the learnt gain lost "
    "past the training length (0: perfect extrapolation, ≥ 1: worse than guessing). Supported if the "
    f"sinusoidal deg < {EXTRAPOLATES} on every seed; refuted if > {FAILS} on every seed while ALiBi's < "
    f"{EXTRAPOLATES} (so the task can be extrapolated); nuanced if {EXTRAPOLATES}–{FAILS} on every seed; "
    "otherwise inconclusive.",
)
def _c29(ms: dict[str, Metric]) -> Verdict:
    deg, deg_a = ms["deg_sinusoidal"], ms["deg_alibi"]
    T = setting(ms, "train_length")
    facts_en = (
        f"Trained at T={T}, the sinusoidal model's loss goes from {ms['in_sinusoidal'].fmt()} inside the "
        f"training length to {ms['past_sinusoidal'].fmt()} beyond it (uniform guessing: "
        f"{ms['uniform'].fmt()}); it loses {deg.fmt()} of what it had learnt (ALiBi, on the same task: "
        f"{deg_a.fmt()})."
    )
    facts_zh = (
        f"在 T={T} 上训练后，正弦编码模型的 loss 在训练长度内为 {ms['in_sinusoidal'].fmt()}，超出后为 "
        f"{ms['past_sinusoidal'].fmt()}（均匀猜测：{ms['uniform'].fmt()}）；学到的收益损失了 {deg.fmt()}"
        f"（同一任务上 ALiBi 为 {deg_a.fmt()}）。"
    )
    works, n = count_seeds(ms, ("deg_sinusoidal",), lambda v: v < EXTRAPOLATES)
    fails, _ = count_seeds(ms, ("deg_sinusoidal", "deg_alibi"), lambda s, a: s > FAILS and a < EXTRAPOLATES)
    partial, _ = count_seeds(ms, ("deg_sinusoidal",), lambda v: EXTRAPOLATES <= v <= FAILS)
    if works == n:
        return Verdict("supported", facts_en, facts_zh)
    if fails == n:
        return Verdict(
            "refuted",
            facts_en + " The table has values past T, but the model never learnt to use them: a "
            "complete frequency range is not extrapolation.",
            facts_zh + "正弦表在 T 之后确实有值，但模型从未学会使用这些值：频率范围完整并不等于能外推。",
        )
    if partial == n:
        return Verdict("nuanced", facts_en + " It extrapolates only partly.", facts_zh + "只能部分外推。")
    return Verdict(
        "inconclusive",
        facts_en + " The seeds disagree, or the task did not allow even ALiBi to extrapolate.",
        facts_zh + "各种子结论不一致，或该任务上连 ALiBi 也无法外推。",
    )


@claim(
    "C30-learned-no-extrapolation",
    experiment="pe-lm",
    metrics=("learned_raises_past_table", "in_learned", "past_learned", "deg_learned"),
    rule_text="Supported if a learned table of T rows refuses position T and a model trained at T with a 4T table "
    f"loses > {FAILS:.0%} of its gain past T (deg > {FAILS}) on every seed; nuanced if it refuses but deg "
    f"≤ {FAILS} on every seed; refuted if it does not refuse; otherwise inconclusive.",
)
def _c30(ms: dict[str, Metric]) -> Verdict:
    raises, deg = ms["learned_raises_past_table"], ms["deg_learned"]
    bad, n = count_seeds(ms, ("learned_raises_past_table", "deg_learned"), lambda r, d: r == 1 and d > FAILS)
    ok, _ = count_seeds(ms, ("learned_raises_past_table", "deg_learned"), lambda r, d: r == 1 and d <= FAILS)
    en = (
        f"A table of T rows has no row T (the model refuses position T: {fmt_count(raises)}); with a table 4× "
        "longer, the rows past T stay at their random initial values and the loss goes from "
        f"{ms['in_learned'].fmt()} to {ms['past_learned'].fmt()} (deg {deg.fmt()})."
    )
    zh = (
        f"T 行的表没有第 T 行（位置 T 被拒绝：{fmt_count(raises)}）；把表加长到 4 倍，T 之后的行仍停留在随机初始值，"
        f"loss 从 {ms['in_learned'].fmt()} 变为 {ms['past_learned'].fmt()}（deg {deg.fmt()}）。"
    )
    if bad == n:
        return Verdict("supported", en, zh)
    if ok == n:
        return Verdict(
            "nuanced",
            en + f" The untrained rows did not hurt much here (deg ≤ {FAILS}).",
            zh + f"这里未训练的行影响不大（deg ≤ {FAILS}）。",
        )
    if max(raises.values) == 0:
        return Verdict("refuted", en, zh)
    return Verdict("inconclusive", en, zh)


@claim(
    "C31-sinusoidal-vs-learned",
    experiment="pe-lm",
    metrics=("in_sinusoidal", "in_learned", "floor", "train_steps"),
    rule_text=f"Supported if |loss(sinusoidal) − loss(learned)| ≤ {TOL_LOSS} nats inside the training length on "
    "every seed; refuted if one is better by more than that on every seed; otherwise inconclusive.",
)
def _c31(ms: dict[str, Metric]) -> Verdict:
    diffs = differences(ms, "in_sinusoidal", "in_learned")
    d = fmt_values(diffs, " nats")
    en = (
        f"Inside the training length, after {fmt_count(ms['train_steps'])} steps: sinusoidal "
        f"{ms['in_sinusoidal'].fmt()}, learned {ms['in_learned'].fmt()} (difference {d}; best possible "
        f"{ms['floor'].fmt()})."
    )
    zh = (
        f"训练 {fmt_count(ms['train_steps'])} 步后，训练长度内：正弦 {ms['in_sinusoidal'].fmt()}，可学习 "
        f"{ms['in_learned'].fmt()}（差 {d}；理论最优 {ms['floor'].fmt()}）。"
    )
    if all(abs(x) <= TOL_LOSS for x in diffs):
        return Verdict("supported", en, zh)
    if all(x > TOL_LOSS for x in diffs) or all(x < -TOL_LOSS for x in diffs):
        better = "learned" if diffs[0] > 0 else "sinusoidal"
        return Verdict(
            "refuted",
            en + f" The {better} table is consistently better by more than {TOL_LOSS} nats.",
            zh + f"{'可学习' if better == 'learned' else '正弦'}编码稳定地好出 {TOL_LOSS} nat 以上。",
        )
    return Verdict(
        "inconclusive",
        en + " The seeds disagree about the sign or size of the gap.",
        zh + "各种子对差距的方向或大小不一致。",
    )
