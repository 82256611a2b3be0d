"""What the gpt exercise says of a finding: the pitfall's record (``anatomy.pitfalls.records``: the model-level
names are the doctor's, ``catalog_model.py``; ``head_not_tied`` is the course's, ``catalog_course.py``), the post's
sentence where it has one, and the course's hint in the exercise's terms where the record gives none."""

from __future__ import annotations

from anatomy.course.grader import Result
from anatomy.course.spec import BrokenRule

ADDED = (
    "Transformer采用的是直接相加——把位置向量加到词向量上。",
    "the Transformer adds them directly: the position vector is added to the word vector.",
)
ORDERLESS = (
    "Attention天然“没有顺序”必须用数学把上下文顺序找回来",
    "attention has no order by nature: positions bring it back",
)
CAUSAL = (
    "Causal Mask用于自回归场景要求每个位置只能看到它自己以及之前的位置。",
    "the causal mask, for autoregressive models, lets each position see only itself and the positions before it.",
)
PRE_NORM = (
    "Pre-Norm先对输入做LayerNorm再进入Sublayer最后再做残差相加。",
    "Pre-Norm normalises the input, runs the sub-layer, then adds the residual: the stream itself is never normalised.",
)
NONE = ("", "")

# name -> (post, hint en, hint zh): the course's words for each finding of this exercise
COURSE: dict[str, tuple[tuple[str, str], str, str]] = {
    "targets_not_shifted": (
        NONE,
        "position t predicts token t+1: F.cross_entropy(logits[:, :-1].reshape(-1, V), targets[:, 1:].reshape(-1), "
        "ignore_index=PAD)",
        "位置 t 预测第 t+1 个 token：F.cross_entropy(logits[:, :-1].reshape(-1, V), targets[:, 1:].reshape(-1), "
        "ignore_index=PAD)",
    ),
    "targets_shifted_twice": (
        NONE,
        "shift once: logits[:, :-1] against targets[:, 1:] (targets are the same ids as the input)",
        "只错开一次：logits[:, :-1] 对 targets[:, 1:]（targets 就是输入的同一串 id）",
    ),
    "pads_in_loss": (
        NONE,
        "F.cross_entropy(..., ignore_index=PAD): the pads after the real tokens are not predicted",
        "F.cross_entropy(..., ignore_index=PAD)：真实 token 之后的 pad 不参与预测",
    ),
    "positions_missing": (
        ORDERLESS,
        "x = self.tok(ids) + positions[:T]: add them once, before the first block",
        "x = self.tok(ids) + positions[:T]：在第一个 Block 之前加一次",
    ),
    "positions_added_twice": (
        ADDED,
        "add the positions once, to the token embedding, before the blocks; the blocks take x as it is",
        "位置只加一次：加在词嵌入上、所有 Block 之前；Block 直接接收 x",
    ),
    "positions_after_blocks": (
        ADDED,
        "x = self.tok(ids) + positions[:T] before the first block: the attention needs them to know the order",
        "在第一个 Block 之前 x = self.tok(ids) + positions[:T]：注意力要靠它们才知道顺序",
    ),
    "embedding_scaled_twice": (
        ADDED,
        "multiply the token embedding by math.sqrt(d_model) at most once (or not at all)",
        "词嵌入最多乘一次 math.sqrt(d_model)（也可以不乘）",
    ),
    "final_norm_missing": (
        PRE_NORM,
        "logits = self.head(self.norm(x)) with self.norm = nn.LayerNorm(d_model): Pre-Norm blocks leave x "
        "un-normalised",
        "logits = self.head(self.norm(x))，其中 self.norm = nn.LayerNorm(d_model)：Pre-Norm 的 Block 输出没有归一化",
    ),
    "tied_by_copy": (
        NONE,
        "one Parameter for both: self.head.weight = self.tok.weight (not a copy, not .data, not nn.Parameter(...))",
        "两者共用同一个 Parameter：self.head.weight = self.tok.weight（不要复制，不要 .data，不要 nn.Parameter(...)）",
    ),
    "causal_mask_missing_in_layer": (
        CAUSAL,
        "give every block the mask: for block in self.blocks: x = block(x, mask)",
        "每个 Block 都要传掩码：for block in self.blocks: x = block(x, mask)",
    ),
    "functional_dropout_in_eval": (
        NONE,
        "F.dropout(x, p, training=self.training), or self.drop = nn.Dropout(p) in __init__",
        "F.dropout(x, p, training=self.training)，或在 __init__ 里 self.drop = nn.Dropout(p)",
    ),
}


def finding(name: str, line: int | None, source: str, extra: tuple[str, str] = NONE) -> BrokenRule:
    """The finding ``name`` at the learner's line: its record's summary with ``extra`` (the numbers, the layer)
    added, the post's sentence, the record's hint or else the course's (:data:`COURSE`)."""
    from anatomy.pitfalls import records

    r = records.get(name)
    if r is None:
        raise KeyError(f"no pitfall record named {name!r}")
    post, hint_en, hint_zh = COURSE.get(name, (NONE, "", ""))
    what = (r.summary_en.rstrip(".") + extra[0], r.summary_zh.rstrip("。") + extra[1])
    if r.hint_en and r.hint_zh:
        hint_en, hint_zh = r.hint_en, r.hint_zh
    if r.post_zh and not post[0]:
        post = (r.post_zh, "")
    return BrokenRule(name, line, source, what, post, (hint_en, hint_zh))


def said(result: Result, found: BrokenRule) -> Result:
    """A finding as the short answer and the full report."""
    result.pitfall = found.pitfall
    result.point(found.line, found.source)
    result.more_lines = list(found.more_lines)
    result.brief(found.what[0], found.what[1])
    if found.post[0]:
        result.brief(f"the post: 「{found.post[0]}」", f"原文：「{found.post[0]}」")
    result.brief(f"hint: {found.hint[0]}", f"提示：{found.hint[1]}")
    where_en = f"line {found.line} `{found.source}`: " if found.line else ""
    where_zh = f"第 {found.line} 行 `{found.source}`：" if found.line else ""
    result.say(
        f"pitfall `{found.pitfall}` — {where_en}{found.what[0]}", f"坑 `{found.pitfall}` —— {where_zh}{found.what[1]}"
    )
    if found.post[0]:
        result.say(
            f"the post: 「{found.post[0]}」" + (f" ({found.post[1]})" if found.post[1] else ""),
            f"原文：「{found.post[0]}」",
        )
    result.say(f"hint: {found.hint[0]}", f"提示：{found.hint[1]}")
    return result


def not_the_block(exercise: str, block: Result) -> Result:
    """The block is not yet the block exercise's: its finding, said as the block exercise says it."""
    result = Result(exercise, block.file, passed=False, pitfall=block.pitfall)
    result.point(block.line, block.source)
    result.more_lines, result.table, result.warnings = list(block.more_lines), block.table, list(block.warnings)
    for lang, lead in (
        ("en", "your TransformerBlock is not yet the block exercise's"),
        ("zh", "你的 TransformerBlock 还不是 block 练习要的"),
    ):
        result.short[lang] = [lead] + (block.short[lang] or block.messages[lang][:2])
        result.messages[lang] = [lead + " (anatomy learn check block):"] + block.messages[lang]
    return result
