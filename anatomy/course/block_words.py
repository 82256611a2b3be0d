"""What the course says of a finding (``block_rules.py``, ``layernorm.py``, ``randomness.py`` find them): the words
are the pitfall's record (``anatomy.pitfalls.records``), with the finding's numbers added, and the course's hint
where a record has none; ``unexplained`` says by how much the output differs and where."""

from __future__ import annotations

from typing import Any

from anatomy.course.spec import BrokenRule

BLOCK = (
    "结构里同时包含Multi-Head、前馈网络、两个残差和两个LayerNorm……每一个LayerNorm都需要分别拥有自己的可学习参数gamma和beta。",
    "it holds multi-head attention, a feed-forward network, two residuals and two LayerNorms ... each LayerNorm "
    "needs its own learnable gamma and beta.",
)
MHA = (
    "生成Q/K/V……拆头……逐头计算注意力……并头……输出投影。",
    "make Q/K/V ... split the heads ... attention per head ... merge the heads ... the output projection.",
)
SCALE = (
    "除以sqrt(d_k)的本质是把点积结果的方差重新拉回到1附近让softmax有正常的温度。",
    "dividing by sqrt(d_k) brings the dot products' variance back to about 1, so the softmax has a normal temperature.",
)
# name -> (what en, what zh, post, hint en, hint zh): a course name no record holds
WORDS: dict[str, tuple[str, str, tuple[str, str], str, str]] = {
    "scale_not_sqrt": (
        "the scores are divided by Dh instead of sqrt(Dh)",
        "分数除以了 Dh 而不是 sqrt(Dh)",
        SCALE,
        "the factor is 1 / math.sqrt(d_k), not 1 / d_k",
        "缩放因子是 1 / math.sqrt(d_k)，不是 1 / d_k",
    ),
}


# the course's hint where a record gives none (the doctor's records speak of modules, not of an exercise)
HINTS = {
    "batchnorm_instead_of_layernorm": (
        "nn.LayerNorm(d_model): statistics over each token's features, the same in training and evaluation",
        "nn.LayerNorm(d_model)：在每个 token 的特征上求统计量，训练和评估时完全相同",
    ),
}
# the numbers a finding adds to its record's summary, (en, zh) formats of the finding's arguments
DETAILS = {
    "ffn_ignores_d_ff": (" (its hidden layer is {0} wide, d_ff is {1})", "（隐藏层宽 {0}，d_ff 是 {1}）"),
    "norm_init_swapped": (" ({0} starts at the other one's value)", "（{0} 的初始值是另一个参数的）"),
    "norm_init_wrong": (" ({0}, the norm's {1}, starts elsewhere)", "（{0} 是 Norm 的 {1}，初始值不对）"),
    "differs_in_training": (" (up to {0:.3g} apart)", "（最多相差 {0:.3g}）"),
    "scale_from_wrong_size": (
        " (your scale is {0:.4f}; 1/sqrt(Dh) is 0.5)",
        "（你的缩放因子是 {0:.4f}；1/sqrt(Dh) 是 0.5）",
    ),
    "softmax_wrong_axis": (" (here dim={0}: over the {1})", "（这里 dim={0}：作用在 {1} 这一维上）"),
    "no_scaling": ("", ""),
}


def finding(name: str, line: int | None, source: str, *args: Any) -> BrokenRule:  # args: the numbers DETAILS formats
    """The finding ``name`` at the learner's ``line``: its record's words (``anatomy.pitfalls.records``), else
    the course's own (:data:`WORDS`, for the few the records do not hold yet), with the finding's numbers."""
    from anatomy.pitfalls import records

    if name == "unexplained":
        return _unexplained(line, source, *args)
    detail = DETAILS.get(name, ("", ""))
    extra = (detail[0].format(*args), detail[1].format(*args)) if args and detail[0] else ("", "")
    r = records.get(name)
    hint = (r.hint_en, r.hint_zh) if r is not None and r.hint_en and r.hint_zh else HINTS.get(name)
    if r is not None and hint is not None:
        what = (r.summary_en.rstrip(".") + extra[0], r.summary_zh.rstrip("。") + extra[1])
        return BrokenRule(name, line, source, what, (r.post_zh or "", ""), hint)
    en, zh, post, hint_en, hint_zh = WORDS[name]
    return BrokenRule(name, line, source, (en + extra[0], zh + extra[1]), post, (hint_en, hint_zh))


def _unexplained(
    line: int | None,
    source: str,
    size: float | None,
    where: tuple[str, str] | None,
    mha: bool,
    diag: dict[str, Any],
) -> BrokenRule:
    what = "multi-head attention" if mha else "block"
    what_zh = "多头注意力" if mha else "Block"
    if diag.get("status") == "unavailable":
        reason = diag.get("reason")
        en = (
            f"your {what}'s weights could not be mapped onto the exercise's reference"
            + (f" ({reason})" if reason else "")
            + ", so its output cannot be shown to equal the reference's: keep to the exercise's parts"
        )
        zh = f"没法把你的{what_zh}的权重对应到练习的参考实现上，因此无法确认输出与参考一致：请按练习要求的组成部分来写"
    else:
        amount = f" by up to {size:.3g}" if isinstance(size, (int, float)) else ""
        at = f"; where it first differs: {where[0]}" if where else ""
        at_zh = f"；第一个不同出现在{where[1]}" if where else ""
        en = f"with the same weights your {what}'s output differs from the exercise's reference{amount}{at}"
        zh = (
            f"用同样的权重，你的{what_zh}的输出与练习的参考实现不同"
            + (f"（最多相差 {size:.3g}）" if isinstance(size, (int, float)) else "")
            + at_zh
        )
    return BrokenRule(
        "unexplained",
        line,
        source,
        (en, zh),
        BLOCK if not mha else MHA,
        (
            "compare each step with the post's flow: anatomy trace FILE.py:CLASS prints your shapes step by step",
            "把每一步和原文的流程对照：anatomy trace FILE.py:CLASS 会逐步打印你的形状",
        ),
    )
