"""Grading of the function exercises (attention, heads, masks, sinusoidal): probes, pitfalls and where they sit.

A probe is a list of calls on float64 inputs whose named sizes all differ (B=2, H=3, T=5, S=7, Dh=4, D=12), so a
shape says which axis is which. A pitfall is a named wrong implementation, written as the mistake is made in real
code; the learner's outputs are compared with the reference's and, when they differ, with every pitfall's: the one
that reproduces them is named, with the post's sentence, the learner's line (found in the recording of their
code) and the numbers that show it. Attention and heads are here; masks and the sinusoidal table in
``functions_pe.py``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from anatomy.course.functions_pe import (
    MASKS,
    SINUSOIDAL,
    _causal,
    _padding,
    _sinusoidal,
    masks_calls,
    sinusoidal_calls,
)
from anatomy.course.probe import SIZES, Call, Pitfall, _g, from_record

# ------------------------------------------------------------------------------------------------ attention


def _ref_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    *,
    scale: float | None = None,
    softmax_dim: int = -1,
    after: bool = False,
    invert: bool = False,
    ignore: bool = False,
    late: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The reference (no keyword) and its wrong variants; ``late``: the scale applied to the weights."""
    scale = 1 / math.sqrt(q.size(-1)) if scale is None else scale
    scores = q @ k.transpose(-2, -1) * (1.0 if late else scale)  # (B, H, T, S)
    if mask is not None and not ignore:
        keep = ~mask if invert else mask
        if after:
            w = torch.softmax(scores, dim=softmax_dim).masked_fill(~keep, 0.0)
            return w @ v, w
        scores = scores.masked_fill(~keep, float("-inf"))
    w = torch.nan_to_num(torch.softmax(scores, dim=softmax_dim))  # (B, H, T, S)
    w = w * scale if late else w
    return w @ v, w


def attention_calls() -> list[Call]:
    g = _g(0)
    b, h, t, s, dh = (SIZES[n] for n in ("B", "H", "T", "S", "Dh"))
    q, k, v = (torch.randn(b, h, n, dh, generator=g, dtype=torch.float64) * 2 for n in (t, s, s))
    pad = (torch.arange(s)[None, :] < torch.tensor([s, 4])[:, None])[:, None, None]  # (B, 1, 1, S)
    rnd = torch.rand(1, h, t, s, generator=g) < 0.6
    rnd[..., 0] = True  # every row sees a key
    dims = ("B H T Dh", "B H S Dh", "B H S Dh")
    return [
        Call("attention", (q, k, v), dims),
        Call("attention", (q, k, v, pad), dims + ("B . . S",)),
        Call("attention", (q, k, v, rnd), dims + (". H T S",)),
    ]


_SCALE = (
    "除以sqrt(d_k)的本质是把点积结果的方差重新拉回到1附近让softmax有正常的温度。",
    "dividing by sqrt(d_k) brings the dot products' variance back to about 1, so the softmax has a normal temperature.",
)
_MASK = (
    "在softmax之前把对应位置设为一个很大的负数……如果直接在softmax之后把attention矩阵里某些位置置零效果看似一样实际上"
    "softmax已经把这些位置的梯度传给了其他位置数值上并不等价。",
    "set those positions to a large negative number before the softmax ... zeroing them in the attention matrix "
    "after the softmax looks the same, but the softmax has already handed their share to the other positions: "
    "numerically it is not equivalent.",
)

ATTENTION: tuple[Pitfall, ...] = (
    Pitfall(
        "no_scaling",
        ("the scores are not divided by sqrt(Dh)", "分数没有除以 sqrt(Dh)"),
        _SCALE,
        (
            "divide q @ k.transpose(-2, -1) by math.sqrt(q.size(-1))",
            "把 q @ k.transpose(-2, -1) 除以 math.sqrt(q.size(-1))",
        ),
        lambda e: lambda q, k, v, mask=None: _ref_attention(q, k, v, mask, scale=1.0),
        ("matmul", "__matmul__", "bmm", "einsum"),
        ("B", "H", "T", "S"),
        r"@|matmul|einsum|bmm",
        True,
    ),
    Pitfall(
        "scale_not_sqrt",
        ("the scores are divided by Dh instead of sqrt(Dh)", "分数除以了 Dh 而不是 sqrt(Dh)"),
        _SCALE,
        ("the factor is 1 / math.sqrt(d_k), not 1 / d_k", "缩放因子是 1 / math.sqrt(d_k)，不是 1 / d_k"),
        lambda e: lambda q, k, v, mask=None: _ref_attention(q, k, v, mask, scale=1 / q.size(-1)),
        ("div", "__truediv__", "mul", "__mul__", "div_", "mul_", "__itruediv__", "__imul__"),
        ("B", "H", "T", "S"),
        r"/|\*",
        True,
    ),
    Pitfall(
        "softmax_over_queries",
        ("the softmax runs over the queries (dim -2), not the keys", "softmax 作用在查询维（dim -2）上，而不是键维"),
        (
            "计算softmax(QK^T / sqrt(d_k))得到注意力权重……每一行查询位置都要对10个键位置计算相似度",
            "softmax(QK^T / sqrt(d_k)) gives the weights ... every query row is compared with every key position",
        ),
        (
            "torch.softmax(scores, dim=-1): each query's weights over the keys sum to 1",
            "torch.softmax(scores, dim=-1)：每个查询对所有键的权重和为 1",
        ),
        lambda e: lambda q, k, v, mask=None: _ref_attention(q, k, v, mask, softmax_dim=-2),
        ("softmax", "log_softmax"),
        None,
        r"softmax",
        True,
    ),
    Pitfall(
        "mask_after_softmax",
        (
            "the mask zeroes weights after the softmax: the rows no longer sum to 1",
            "掩码在 softmax 之后把权重置零：每行的和不再是 1",
        ),
        _MASK,
        (
            "scores.masked_fill(~mask, float('-inf')) before torch.softmax",
            "在 torch.softmax 之前做 scores.masked_fill(~mask, float('-inf'))",
        ),
        lambda e: lambda q, k, v, mask=None: _ref_attention(q, k, v, mask, after=True),
        ("masked_fill", "masked_fill_", "where", "mul", "__mul__"),
        None,
        r"masked_fill|where|\*",
    ),
    Pitfall(
        "mask_inverted",
        (
            "the mask hides the keys it should keep (True was read as 'hidden')",
            "掩码的含义反了：把该保留的键遮住了（把 True 当成了“遮住”）",
        ),
        ("Padding Mask用于把无效的padding位遮掉", "the padding mask hides the invalid padding positions"),
        (
            "here True means 'may attend': fill where the mask is False, masked_fill(~mask, ...)",
            "这里 True 表示“可以关注”：在 mask 为 False 的地方填充，即 masked_fill(~mask, ...)",
        ),
        lambda e: lambda q, k, v, mask=None: _ref_attention(q, k, v, mask, invert=True),
        ("masked_fill", "masked_fill_", "where"),
        None,
        r"masked_fill|where",
    ),
    Pitfall(
        "mask_ignored",
        ("the mask is never applied", "掩码根本没有被使用"),
        (
            "Padding Mask用于把无效的padding位遮掉。做法是在softmax之前把对应位置设为一个很大的负数",
            "the padding mask hides the padding: before the softmax, set those positions to a large negative number",
        ),
        (
            "if mask is not None: scores = scores.masked_fill(~mask, float('-inf'))",
            "if mask is not None: scores = scores.masked_fill(~mask, float('-inf'))",
        ),
        lambda e: lambda q, k, v, mask=None: _ref_attention(q, k, v, mask, ignore=True),
        ("softmax", "log_softmax"),
        None,
        r"softmax",
    ),
)


ATTENTION += (
    from_record(
        "softmax_wrong_axis",
        lambda e: lambda q, k, v, mask=None: _ref_attention(q, k, v, mask, softmax_dim=1),
        ("softmax", "log_softmax"),
        r"softmax",
        unmasked=True,
    ),
    from_record(
        "softmax_wrong_axis",
        lambda e: lambda q, k, v, mask=None: _ref_attention(q, k, v, mask, softmax_dim=0),
        ("softmax", "log_softmax"),
        r"softmax",
        unmasked=True,
    ),
    from_record(
        "scale_after_softmax",
        lambda e: lambda q, k, v, mask=None: _ref_attention(q, k, v, mask, late=True),
        ("div", "__truediv__", "mul", "__mul__", "div_", "mul_", "__itruediv__", "__imul__"),
        r"sqrt|/|\*",
        out_dims=("B", "H", "T", "S"),
    ),
    from_record(
        "scale_from_wrong_size",
        lambda e: lambda q, k, v, mask=None: _ref_attention(q, k, v, mask, scale=1 / math.sqrt(k.size(-2))),
        ("div", "__truediv__", "mul", "__mul__", "div_", "mul_", "__itruediv__", "__imul__"),
        r"size|shape|sqrt",
        out_dims=("B", "H", "T", "S"),
        unmasked=True,
    ),
)


# ------------------------------------------------------------------------------------------------ heads


def _split(x: torch.Tensor, n_heads: int, *, bad: str | None = None) -> torch.Tensor:
    b, t, d = x.shape
    if bad == "interleaved":
        return x.reshape(b, t, d // n_heads, n_heads).permute(0, 3, 1, 2)  # head h: features h, h+H, h+2H, ...
    if bad == "view":
        return x.reshape(b, n_heads, t, d // n_heads)  # (B, H, T, Dh) in shape only: T and H interleaved
    if bad == "transpose_first":
        return x.transpose(1, 2).reshape(b, n_heads, t, d // n_heads)  # (B, D, T) cut as (B, H, T, Dh)
    return x.reshape(b, t, n_heads, d // n_heads).transpose(1, 2)  # (B, H, T, Dh)


def _merge(x: torch.Tensor, *, bad: str | None = None) -> torch.Tensor:
    b, h, t, dh = x.shape
    if bad == "interleaved":
        return x.permute(0, 2, 3, 1).reshape(b, t, h * dh)  # (B, T, Dh, H) flattened: the heads interleaved
    if bad == "view":
        return x.reshape(b, t, h * dh)  # heads and positions mixed
    if bad == "axes":
        return x.transpose(2, 3).reshape(b, t, h * dh)  # Dh and T swapped, then flattened
    if bad == "reshape_first":
        return x.reshape(b, h * dh, t).transpose(1, 2)  # (B, H, T, Dh) read as (B, D, T), then swapped
    return x.transpose(1, 2).reshape(b, t, h * dh)  # (B, T, D)


def heads_calls() -> list[Call]:
    g = _g(1)
    x = torch.randn(SIZES["B"], SIZES["T"], SIZES["D"], generator=g, dtype=torch.float64)
    z = torch.randn(SIZES["B"], SIZES["H"], SIZES["T"], SIZES["Dh"], generator=g, dtype=torch.float64)
    return [Call("split_heads", (x, SIZES["H"]), ("B T D",)), Call("merge_heads", (z,), ("B H T Dh",))]


_SPLIT = (
    "reshape之后必须紧跟transpose如果顺序反了会把每个头的数据切得乱七八糟",
    "the transpose must follow the reshape: in the other order every head's data is cut to pieces",
)
HEADS: tuple[Pitfall, ...] = (
    Pitfall(
        "split_without_transpose",
        (
            "split_heads reshapes (B, T, D) straight to (B, H, T, Dh): the shape is "
            "right, but each 'head' holds pieces of several positions",
            "split_heads 把 (B, T, D) 直接 reshape 成 (B, H, T, Dh)：形状对了，但每个“头”里装的是几个位置的碎片",
        ),
        _SPLIT,
        (
            "x.reshape(b, t, h, d // h).transpose(1, 2): reshape to (B, T, H, Dh) first",
            "x.reshape(b, t, h, d // h).transpose(1, 2)：先 reshape 成 (B, T, H, Dh)",
        ),
        lambda e: (lambda x, n_heads: _split(x, n_heads, bad="view")) if e == "split_heads" else None,
        ("view", "reshape"),
        ("B", "H", "T", "Dh"),
        r"view|reshape",
    ),
    Pitfall(
        "transpose_before_reshape",
        (
            "split_heads transposes (B, T, D) to (B, D, T) first and then cuts it into "
            "(B, H, T, Dh): the order the post warns about; each head gets pieces of "
            "several features and positions",
            "split_heads 先把 (B, T, D) 转置成 (B, D, T)，再切成 (B, H, T, Dh)：正是原文警告的顺序，"
            "每个头拿到的是几个特征和位置的碎片",
        ),
        _SPLIT,
        (
            "reshape first, then transpose: x.reshape(b, t, h, d // h).transpose(1, 2)",
            "先 reshape 再 transpose：x.reshape(b, t, h, d // h).transpose(1, 2)",
        ),
        lambda e: (lambda x, n_heads: _split(x, n_heads, bad="transpose_first")) if e == "split_heads" else None,
        ("view", "reshape"),
        ("B", "H", "T", "Dh"),
        r"view|reshape",
    ),
    Pitfall(
        "reshape_before_transpose",
        (
            "merge_heads reshapes (B, H, T, Dh) to (B, D, T) and then transposes: the "
            "features of different positions are mixed",
            "merge_heads 先把 (B, H, T, Dh) reshape 成 (B, D, T) 再转置：不同位置的特征被混在一起",
        ),
        (
            "并头转置回(batch, seq_len, 8, 64)然后reshape成(batch, seq_len, 512)",
            "merge: transpose back to (batch, seq_len, 8, 64), then reshape to (batch, seq_len, 512)",
        ),
        (
            "transpose first, then reshape: x.transpose(1, 2).reshape(b, t, h * dh)",
            "先 transpose 再 reshape：x.transpose(1, 2).reshape(b, t, h * dh)",
        ),
        lambda e: (lambda x: _merge(x, bad="reshape_first")) if e == "merge_heads" else None,
        ("view", "reshape", "flatten"),
        ("B", "D", "T"),
        r"view|reshape|flatten",
    ),
    Pitfall(
        "merge_without_transpose",
        (
            "merge_heads reshapes (B, H, T, Dh) straight to (B, T, D): heads and positions are mixed",
            "merge_heads 把 (B, H, T, Dh) 直接 reshape 成 (B, T, D)：头和位置混在了一起",
        ),
        (
            "并头转置回(batch, seq_len, 8, 64)然后reshape成(batch, seq_len, 512)",
            "merge: transpose back to (batch, seq_len, 8, 64), then reshape to (batch, seq_len, 512)",
        ),
        ("x.transpose(1, 2).reshape(b, t, h * dh)", "x.transpose(1, 2).reshape(b, t, h * dh)"),
        lambda e: (lambda x: _merge(x, bad="view")) if e == "merge_heads" else None,
        ("view", "reshape", "flatten"),
        ("B", "T", "D"),
        r"view|reshape|flatten",
    ),
    Pitfall(
        "merge_wrong_axes",
        ("merge_heads swaps the wrong axes before the reshape", "merge_heads 在 reshape 前交换错了轴"),
        (
            "transpose的两个轴分别是1和2也就是把“seq”和“h”互换",
            "the transpose's two axes are 1 and 2: it swaps seq and h",
        ),
        ("transpose(1, 2) swaps H and T", "transpose(1, 2) 交换 H 和 T"),
        lambda e: (lambda x: _merge(x, bad="axes")) if e == "merge_heads" else None,
        ("transpose", "permute", "swapaxes", "mT"),
        None,
        r"transpose|permute|swapaxes",
    ),
)


HEADS += (
    from_record(
        "heads_interleaved",
        lambda e: (lambda x, n_heads: _split(x, n_heads, bad="interleaved")) if e == "split_heads" else None,
        ("view", "reshape", "unflatten"),
        r"view|reshape|unflatten",
        out_dims=("B", "T", "Dh", "H"),
    ),
    from_record(
        "heads_interleaved",
        lambda e: (lambda x: _merge(x, bad="interleaved")) if e == "merge_heads" else None,
        ("permute", "transpose", "view", "reshape"),
        r"permute|transpose|view|reshape",
    ),
)


@dataclass(frozen=True)
class FunctionExercise:
    calls: Callable[[], list[Call]]
    reference: dict[str, Callable[..., Any]]
    pitfalls: tuple[Pitfall, ...]


FUNCTION_EXERCISES = {
    "attention": FunctionExercise(
        attention_calls, {"attention": lambda q, k, v, mask=None: _ref_attention(q, k, v, mask)}, ATTENTION
    ),
    "heads": FunctionExercise(heads_calls, {"split_heads": _split, "merge_heads": _merge}, HEADS),
    "masks": FunctionExercise(masks_calls, {"padding_mask": _padding, "causal_mask": _causal}, MASKS),
    "sinusoidal": FunctionExercise(sinusoidal_calls, {"sinusoidal_encoding": _sinusoidal}, SINUSOIDAL),
}


__all__ = [
    "ATTENTION",
    "FUNCTION_EXERCISES",
    "HEADS",
    "MASKS",
    "SINUSOIDAL",
    "SIZES",
    "Call",
    "FunctionExercise",
    "Pitfall",
    "from_record",
]
