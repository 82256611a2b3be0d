"""The records of attention mistakes learners make that the post does not list as such: the softmax over the wrong
axis, the scale after the softmax or from the wrong size, dropout left on at evaluation, heads laid out interleaved.
``softmax_wrong_axis`` is the worked example of docs/architecture.md ("Adding a pitfall")."""

from __future__ import annotations

from anatomy.pitfalls.catalog_attention import attention_fault
from anatomy.pitfalls.records import Pitfall

_WEIGHTS = "计算softmax(QK^T / sqrt(d_k))得到注意力权重再用这份权重去加权求和Value"
_TEMPERATURE = "除以sqrt(d_k)的本质是把点积结果的方差重新拉回到1附近让softmax有正常的温度"

PITFALLS = (
    Pitfall(
        "softmax_wrong_axis",
        "attention",
        "error",
        "softmax over the wrong axis",
        "softmax 作用在错误的维度上",
        "The softmax runs over another axis than the keys: dim=1 of (B, H, T, S) normalises across the heads, "
        "dim=-2 across the queries, so a query's weights over the keys no longer sum to 1.",
        "softmax 没有沿键的维度计算：在 (B, H, T, S) 上 dim=1 是在各个头之间归一化，dim=-2 是在查询之间归一化，"
        "每个查询对所有键的权重之和不再是 1。",
        "§1.1",
        _WEIGHTS,
        "`torch.softmax(scores, dim=1)` on (B, H, T, S) scores, where `dim=-1` (the keys) was meant",
        "softmax over the last axis, the keys: torch.softmax(scores, dim=-1)",
        "沿最后一维（键）做 softmax：torch.softmax(scores, dim=-1)",
        apply=attention_fault("softmax_wrong_axis"),
        defaults={"dim": 1},
        diagnosis="attention",
        tries=({"dim": -2},),
        symptoms=frozenset({"causal_leak", "padding_leak", "batch_independence"}),
        pointer="softmax",
        course=("softmax_over_queries",),
    ),
    Pitfall(
        "scale_after_softmax",
        "attention",
        "error",
        "scale applied after the softmax",
        "缩放放在了 softmax 之后",
        "The 1/sqrt(d_k) is applied to the softmax's output instead of its input: the softmax still sees the "
        "unscaled scores (and saturates), and the weights no longer sum to 1.",
        "1/sqrt(d_k) 乘在了 softmax 的输出上而不是输入上：softmax 看到的仍是未缩放的分数（照样饱和），"
        "权重之和也不再是 1。",
        "§1.3",
        _TEMPERATURE,
        "`torch.softmax(q @ k.transpose(-2, -1), dim=-1) / math.sqrt(d_k)`",
        "scale the scores before the softmax: softmax(q @ k.transpose(-2, -1) / math.sqrt(d_k), dim=-1)",
        "在 softmax 之前缩放分数：softmax(q @ k.transpose(-2, -1) / math.sqrt(d_k), dim=-1)",
        apply=attention_fault("scale_after_softmax"),
        diagnosis="attention",
        pointer="scale_after",
    ),
    Pitfall(
        "scale_from_wrong_size",
        "attention",
        "error",
        "scale taken from the wrong size",
        "缩放用错了尺寸",
        "The scale is 1/sqrt of another size than d_k: `k.size(-1)` read after `k.transpose(-2, -1)` is the key "
        "length S, not the head width, so the temperature changes with the sequence length.",
        "缩放取了 d_k 以外的尺寸：在 `k.transpose(-2, -1)` 之后读 `k.size(-1)` 得到的是键的长度 S 而不是头的宽度，"
        "softmax 的温度随序列长度变化。",
        "§1.3",
        "两个维度为d_k的随机向量的点积方差就是d_k除以它的平方根方差归位",
        "`math.sqrt(k.size(-1))` after `k = k.transpose(-2, -1)` (or `scores.size(-1)`)",
        "take d_k from the head width: math.sqrt(q.size(-1)) or math.sqrt(self.d_k)",
        "d_k 取每个头的宽度：math.sqrt(q.size(-1)) 或 math.sqrt(self.d_k)",
        apply=attention_fault("scale_from_wrong_size"),
        diagnosis="attention",
        pointer="scale",
    ),
    Pitfall(
        "dropout_at_eval",
        "attention",
        "error",
        "dropout left on at evaluation",
        "评估时 dropout 仍然开着",
        "Functional dropout without `training=self.training` drops weights in eval mode too: the same input "
        "gives another output on every call, and an evaluated model is not the trained one.",
        "函数式 dropout 没有传 `training=self.training`，eval 模式下也在丢弃权重：同一个输入每次调用得到不同的输出，"
        "评估的也就不是训练好的模型。",
        "",
        None,
        "`F.dropout(weights, 0.1)` (training defaults to True) where `self.dropout(weights)` or "
        "`F.dropout(weights, p, training=self.training)` was meant",
        "use a module, self.dropout = nn.Dropout(p), or F.dropout(w, p, training=self.training)",
        "用模块 self.dropout = nn.Dropout(p)，或 F.dropout(w, p, training=self.training)",
        apply=attention_fault("dropout_at_eval"),
        defaults={"p": 0.1},
        symptoms=frozenset({"token_order", "batch_independence", "causal_leak", "padding_leak"}),
        pointer="dropout",
    ),
    Pitfall(
        "heads_interleaved",
        "attention",
        "warning",
        "heads laid out interleaved",
        "多头按交错方式排布",
        "The heads are split by reshaping to (B, T, Dh, H): head h takes features h, h + H, h + 2H, ... instead of "
        "the block h·Dh ... (h + 1)·Dh - 1, so weights laid out as the post's (or a checkpoint's) feed other heads.",
        "拆头时 reshape 成 (B, T, Dh, H)：第 h 个头拿到的是第 h、h + H、h + 2H…… 个特征，而不是连续的一段 "
        "h·Dh 到 (h + 1)·Dh - 1，按原文（或预训练权重）排布的参数被送进了别的头。",
        "§2.1",
        "操作上是先reshape成(batch, seq_len, 8, 64)再转置成(batch, 8, seq_len, 64)让头维度排在batch之后方便并行计算",
        "`x.view(B, T, Dh, H).permute(0, 3, 1, 2)` where `x.view(B, T, H, Dh).transpose(1, 2)` was meant",
        "the head axis comes before the head's features: x.view(b, t, h, d_k).transpose(1, 2)",
        "头的维度在每个头的特征之前：x.view(b, t, h, d_k).transpose(1, 2)",
        apply=attention_fault("heads_interleaved"),
        diagnosis="attention",
    ),
)

__all__ = ["PITFALLS"]
