"""The records of the pitfalls that live in attention code: the scale, the split and merge of heads, the mask."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from anatomy.pitfalls import faults as F
from anatomy.pitfalls.records import Pitfall


def attention_fault(name: str) -> Callable[..., None]:
    """The attention fault ``name``: its wrapper around one step of every attention module (pitfalls/faults.py)."""
    return partial(F.attention_fault, name=name)


_LEAKS = frozenset({"token_order", "padding_leak", "causal_leak"})

PITFALLS = (
    Pitfall(
        "no_scaling",
        "attention",
        "error",
        "scores not scaled by 1/sqrt(d_k)",
        "分数没有除以 sqrt(d_k)",
        "Scores are not divided by sqrt(d_k): their variance grows with d_k and softmax saturates.",
        "点积没有除以 sqrt(d_k)：分数方差随 d_k 增大，softmax 饱和成硬选择，梯度消失。",
        "§1.3",
        "我在自己的实现里试过去掉缩放模型前几步loss确实还在下降但很快就卡住不动了",
        "the line `scores = q @ k.transpose(-2, -1)`",
        "divide the scores by math.sqrt(self.d_k), the width of one head",
        "把分数除以 math.sqrt(self.d_k)，即单个头的维度",
        apply=attention_fault("no_scaling"),
        diagnosis="attention",
        pointer="scale",
        course=("no_scaling",),
    ),
    Pitfall(
        "scale_by_d_model",
        "attention",
        "error",
        "scaled by sqrt(d_model) instead of sqrt(d_k)",
        "用 sqrt(d_model) 代替了 sqrt(d_k)",
        "Scores are divided by sqrt(d_model) instead of sqrt(d_k = d_model / h): too soft by a factor sqrt(h).",
        "用 sqrt(d_model) 而不是每个头的 sqrt(d_k) 缩放：注意力被压得过于平均（差 sqrt(h) 倍）。",
        "§1.3",
        "两个维度为d_k的随机向量的点积方差就是d_k除以它的平方根方差归位",
        "the scale constant: `math.sqrt(d_model)` where `d_model // h` was meant",
        "the scale is sqrt(d_k) with d_k = d_model // n_heads, not sqrt(d_model)",
        "缩放用 sqrt(d_k)，d_k = d_model // n_heads，而不是 sqrt(d_model)",
        apply=attention_fault("scale_by_d_model"),
        diagnosis="attention",
        points_for=("scaling",),
        pointer="scale",
    ),
    Pitfall(
        "split_without_transpose",
        "attention",
        "error",
        "heads split by reshape without transpose",
        "拆头时 reshape 后没有 transpose",
        "Heads are split by reshaping (B, T, D) straight to (B, H, T, Dh): each 'head' gets slices of other "
        "tokens, so heads mix tokens and positions. Shapes are right; the numbers are not.",
        "拆头时直接 reshape 成 (B, H, T, Dh) 而没有先 (B, T, H, Dh) 再 transpose：每个头拿到的是别的 token 的切片，"
        "形状没错，数值全错。",
        "§2.2",
        "reshape之后必须紧跟transpose如果顺序反了会把每个头的数据切得乱七八糟",
        "the split: `x.view(B, H, T, Dh)` instead of `x.view(B, T, H, Dh).transpose(1, 2)`",
        "x.view(b, t, h, d_k).transpose(1, 2): reshape to (B, T, H, Dh) first",
        "x.view(b, t, h, d_k).transpose(1, 2)：先变成 (B, T, H, Dh)",
        apply=attention_fault("split_without_transpose"),
        diagnosis="attention",
        symptoms=_LEAKS,
        points_for=("token_order",),
        pointer="split",
        course=("split_without_transpose",),
    ),
    Pitfall(
        "transpose_before_reshape",
        "attention",
        "error",
        "heads split by transposing before the reshape",
        "拆头时先 transpose 再 reshape",
        "The heads are split by transposing (B, T, D) first and reshaping after: the order the post warns about; "
        "each head gets pieces of several features and positions",
        "拆头时先转置 (B, T, D) 再 reshape：正是原文警告的顺序，每个头拿到的是几个特征和位置的碎片",
        "§2.2",
        "reshape之后必须紧跟transpose如果顺序反了会把每个头的数据切得乱七八糟",
        "the split: `x.transpose(1, 2).reshape(B, H, T, Dh)`",
        "reshape first, then transpose: x.reshape(b, t, h, d_k).transpose(1, 2)",
        "先 reshape 再 transpose：x.reshape(b, t, h, d_k).transpose(1, 2)",
        pointer="split",
        course=("transpose_before_reshape",),
    ),
    Pitfall(
        "merge_wrong_transpose",
        "attention",
        "error",
        "heads merged without transposing back",
        "并头时没有先转置回来",
        "Heads are merged by reshaping (B, H, T, Dh) straight to (B, T, D) without transposing back: output "
        "token t is stitched from pieces of several tokens.",
        "并头时没有先 transpose 回 (B, T, H, Dh) 就 reshape：输出的每个 token 由多个 token 的碎片拼成（串味）。",
        "§2.1",
        "并头转置回(batch, seq_len, 8, 64)然后reshape成(batch, seq_len, 512)",
        "the merge: `out.reshape(B, T, D)` instead of `out.transpose(1, 2).reshape(B, T, D)`",
        "out.transpose(1, 2).reshape(b, t, d): swap H and T back before the reshape",
        "out.transpose(1, 2).reshape(b, t, d)：reshape 之前先把 H 和 T 换回来",
        apply=attention_fault("merge_wrong_transpose"),
        diagnosis="attention",
        symptoms=_LEAKS,
        pointer="merge",
        course=("merge_without_transpose",),
    ),
    Pitfall(
        "mask_after_softmax",
        "mask",
        "error",
        "mask applied after softmax",
        "mask 在 softmax 之后才施加",
        "The mask zeroes weights after softmax: the remaining weights no longer sum to 1 and hidden keys still "
        "shaped the normalisation.",
        "在 softmax 之后才把权重置零：剩下的权重之和不再是 1，被遮住的位置仍影响了归一化。",
        "§2.4",
        "如果直接在softmax之后把attention矩阵里某些位置置零效果看似一样实际上softmax已经把这些位置的梯度传给了其他位置"
        "数值上并不等价",
        "`weights = softmax(scores) * mask` instead of filling the scores before softmax",
        "scores.masked_fill(~mask, float('-inf')) before the softmax",
        "在 softmax 之前做 scores.masked_fill(~mask, float('-inf'))",
        apply=attention_fault("mask_after_softmax"),
        diagnosis="attention",
        needs="padding",
        symptoms=frozenset({"padding_leak", "shape", "causal_leak"}),
        points_for=("masked_weights",),
        pointer="mask",
        course=("mask_after_softmax",),
    ),
    Pitfall(
        "finite_mask_fill",
        "mask",
        "warning",
        "finite mask fill overflows in float16",
        "有限值 mask 填充在 float16 下溢出",
        "Hidden scores are filled with a finite value: harmless in float32 for -1e9, but -1e4 leaks weight, "
        "-1e9 overflows to -inf in float16, and fully masked rows become uniform instead of empty.",
        "用有限值（-1e9、-1e4、finfo.min）代替 -inf 填充：float16 下 -1e9 溢出，-1e4 会泄漏概率，"
        "全遮住的行变成均匀分布。",
        "§2.4",
        "我一开始图省事把-inf写成了-1e9结果训练出的模型在生成测试时会逐步出现输出质量下降",
        "`scores.masked_fill(~mask, -1e9)`, and the same family: `-2**32 + 1`, `-9e15`, `-1e10`, `-1e4`",
        apply=attention_fault("finite_mask_fill"),
        defaults={"fill": -1e9},
        pointer="mask",
        course=("fill_minus_1e9",),
    ),
    Pitfall(
        "inf_fill_no_guard",
        "mask",
        "warning",
        "NaN on fully-masked rows (-inf fill, no guard)",
        "整行被遮住时输出 NaN（-inf 填充且未处理）",
        "-inf fill without a guard for rows that see no key: softmax of an all -inf row is NaN, and the NaN "
        "spreads to the next layer and to every gradient.",
        "用 -inf 填充但没有处理整行都被遮住的情况：softmax 得到 NaN，并扩散到下一层和梯度。",
        "§2.4",
        "把注意力分数矩阵的上三角部分全部置为-inf然后才做softmax",
        "left padding with a causal mask, or an all-padding sequence in a batch",
        apply=attention_fault("inf_fill_no_guard"),
        points_for=("nan_rows",),
        pointer="mask",
    ),
    Pitfall(
        "padding_mask_on_queries",
        "mask",
        "error",
        "padding mask on queries instead of keys",
        "padding mask 遮了 query 而不是 key",
        "The padding mask hides padded *queries* (rows) instead of padded *keys* (columns): real tokens attend "
        "to padding.",
        "padding mask 遮住了 query（行）而不是 key（列）：真实 token 仍然在关注 padding。",
        "§2.4",
        "Padding Mask用于把无效的padding位遮掉",
        "a (B, 1, S, 1) mask where (B, 1, 1, S) was meant (`mask.unsqueeze(-1)`)",
        apply=attention_fault("padding_mask_on_queries"),
        diagnosis="attention",
        needs="padding",
        symptoms=frozenset({"padding_leak"}),
        points_for=("padding_leak",),
        pointer="mask",
    ),
    Pitfall(
        "causal_off_by_one",
        "mask",
        "error",
        "causal mask off by one",
        "因果 mask 错了一位",
        "The causal mask's diagonal is shifted: with +1 every token also sees the next one (a leak of the "
        "future), with -1 it cannot see itself.",
        "因果 mask 的对角线错了一位：+1 时每个位置能看到下一个 token（泄漏未来）。",
        "§2.4",
        "要求每个位置只能看到它自己以及之前的位置",
        "`torch.triu(ones, diagonal=0)` vs `diagonal=1`",
        apply=attention_fault("causal_off_by_one"),
        defaults={"causal_offset": 1},
        diagnosis="attention",
        needs="causal",
        symptoms=frozenset({"causal_leak"}),
        points_for=("causal_leak",),
        pointer="mask",
        course=("causal_sees_next",),
    ),
)

__all__ = ["PITFALLS"]
