"""Grading of the function exercises (attention, heads, masks, sinusoidal): probes, pitfalls and where they sit.

A probe is a list of calls on float64 inputs whose named sizes all differ (B=2, H=3, T=5, S=7, Dh=4, D=12), so a
shape says which axis is which. A pitfall is a named wrong implementation, written as the mistake is made in real
code; the learner's outputs are compared with the reference's and, when they differ, with every pitfall's: the one
that reproduces them is named, with the post's sentence, the learner's line (found in the recording of their
code) and the numbers that show it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

SIZES = {"B": 2, "H": 3, "T": 5, "S": 7, "Dh": 4, "D": 12}


@dataclass(frozen=True)
class Call:
    entry: str
    args: tuple
    dims: tuple[str, ...] = ()  # legend letters of each tensor argument, for the recorder


@dataclass(frozen=True)
class Pitfall:
    name: str
    what: tuple[str, str]  # what the code does, (en, zh)
    post: tuple[str, str]  # the post's sentence it breaks, (zh, en)
    hint: tuple[str, str]
    variant: Callable  # entry name -> the wrong implementation of that entry (others: the reference)
    ops: tuple[str, ...]  # where to point: the first recorded step with one of these ops...
    out_dims: tuple[str, ...] | None = None  # ...whose output has these dims (None: any)
    text: str = ""  # ...else the first line of the entry's source matching this regex (code the recorder cannot
    # see: Python arithmetic, tensors made from numbers alone)
    unmasked: bool = False  # judged on the calls without a mask (the fill value a learner picks does not matter)


def _g(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# ------------------------------------------------------------------------------------------------ attention


def _ref_attention(q, k, v, mask=None, *, scale=None, softmax_dim=-1, after=False, invert=False, ignore=False):
    scale = 1 / math.sqrt(q.size(-1)) if scale is None else scale
    scores = q @ k.transpose(-2, -1) * scale  # (B, H, T, S)
    if mask is not None and not ignore:
        keep = ~mask if invert else mask
        if after:
            w = torch.softmax(scores, dim=softmax_dim).masked_fill(~keep, 0.0)
            return w @ v, w
        scores = scores.masked_fill(~keep, float("-inf"))
    w = torch.nan_to_num(torch.softmax(scores, dim=softmax_dim))  # (B, H, T, S)
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

ATTENTION = (
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


# ------------------------------------------------------------------------------------------------ heads


def _split(x, n_heads, *, bad=None):
    b, t, d = x.shape
    if bad == "view":
        return x.reshape(b, n_heads, t, d // n_heads)  # (B, H, T, Dh) in shape only: T and H interleaved
    if bad == "transpose_first":
        return x.transpose(1, 2).reshape(b, n_heads, t, d // n_heads)  # (B, D, T) cut as (B, H, T, Dh)
    return x.reshape(b, t, n_heads, d // n_heads).transpose(1, 2)  # (B, H, T, Dh)


def _merge(x, *, bad=None):
    b, h, t, dh = x.shape
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
HEADS = (
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


# ------------------------------------------------------------------------------------------------ masks


def _padding(lengths, max_len, *, bad=None):
    lengths = torch.as_tensor(lengths)
    real = torch.arange(max_len)[None, :] < lengths[:, None]  # (B, S)
    if bad == "inverted":
        return ~real
    if bad == "left":
        return real.flip(-1)
    if bad == "off_by_one":
        return torch.arange(max_len)[None, :] <= lengths[:, None]
    return real


def _causal(t, *, diagonal=0, upper=False):
    ones = torch.ones(t, t, dtype=torch.bool)
    return ones.triu(diagonal) if upper else ones.tril(diagonal)


def masks_calls() -> list[Call]:
    return [
        Call("padding_mask", (torch.tensor([7, 3]), SIZES["S"])),
        Call("padding_mask", (torch.tensor([4, 1]), SIZES["S"])),
        Call("causal_mask", (SIZES["T"],)),
    ]


_CAUSAL = (
    "Causal Mask用于自回归场景要求每个位置只能看到它自己以及之前的位置。",
    "the causal mask lets each position see only itself and the positions before it.",
)
MASKS = (
    Pitfall(
        "padding_inverted",
        ("the padding mask is True on the padding", "padding mask 在 padding 位置上是 True"),
        ("Padding Mask用于把无效的padding位遮掉", "the padding mask hides the invalid padding positions"),
        ("True = may attend: positions < length are True", "True 表示可以关注：位置 < length 为 True"),
        lambda e: (
            (lambda lengths, max_len: _padding(lengths, max_len, bad="inverted")) if e == "padding_mask" else None
        ),
        ("lt", "__lt__", "ge", "__ge__", "gt", "__gt__", "le", "__le__", "logical_not", "__invert__"),
        None,
        r"<|>|~|logical_not|arange",
    ),
    Pitfall(
        "padding_on_the_left",
        ("the padding mask puts the padding before the real tokens", "padding mask 把 padding 放在了真实 token 之前"),
        ("Padding Mask用于把无效的padding位遮掉", "the padding mask hides the invalid padding positions"),
        ("rows are padded after their real tokens here", "这里每行的 padding 在真实 token 之后"),
        lambda e: (lambda lengths, max_len: _padding(lengths, max_len, bad="left")) if e == "padding_mask" else None,
        ("lt", "__lt__", "ge", "__ge__", "gt", "__gt__", "le", "__le__", "flip"),
        None,
        r"flip|<|>|arange",
    ),
    Pitfall(
        "padding_off_by_one",
        (
            "the padding mask keeps one padding position per row (<= instead of <)",
            "padding mask 每行多保留了一个 padding 位（用了 <= 而不是 <）",
        ),
        ("Padding Mask用于把无效的padding位遮掉", "the padding mask hides the invalid padding positions"),
        (
            "positions 0 .. length-1 are real: arange(max_len) < length",
            "位置 0 .. length-1 是真实的：arange(max_len) < length",
        ),
        lambda e: (
            (lambda lengths, max_len: _padding(lengths, max_len, bad="off_by_one")) if e == "padding_mask" else None
        ),
        ("le", "__le__", "ge", "__ge__"),
        None,
        r"<=|>=",
    ),
    Pitfall(
        "causal_future",
        (
            "the causal mask lets each query see the future and hides the past (triu)",
            "causal mask 让每个查询看到未来、遮住过去（用了 triu）",
        ),
        _CAUSAL,
        (
            "torch.ones(t, t, dtype=torch.bool).tril(): the lower triangle, diagonal included",
            "torch.ones(t, t, dtype=torch.bool).tril()：下三角，包含对角线",
        ),
        lambda e: (lambda t: _causal(t, upper=True)) if e == "causal_mask" else None,
        ("triu", "tril"),
        None,
        r"triu|tril",
    ),
    Pitfall(
        "causal_inverted",
        (
            "the causal mask is True on the future only: its sense is inverted",
            "causal mask 只在未来位置为 True：含义反了",
        ),
        _CAUSAL,
        ("True = may attend: the lower triangle with the diagonal", "True 表示可以关注：带对角线的下三角"),
        lambda e: (lambda t: _causal(t, diagonal=1, upper=True)) if e == "causal_mask" else None,
        ("triu", "tril", "logical_not", "__invert__"),
        None,
        r"triu|tril",
    ),
    Pitfall(
        "causal_no_diagonal",
        (
            "the causal mask hides each token from itself (tril(-1)): the first query sees nothing",
            "causal mask 把每个 token 对自己也遮住了（tril(-1)）：第一个查询什么也看不到",
        ),
        _CAUSAL,
        (
            "tril() with diagonal 0 keeps the diagonal: a token sees itself",
            "tril() 的 diagonal=0 保留对角线：token 能看到自己",
        ),
        lambda e: (lambda t: _causal(t, diagonal=-1)) if e == "causal_mask" else None,
        ("tril", "triu"),
        None,
        r"triu|tril",
    ),
    Pitfall(
        "causal_sees_next",
        (
            "the causal mask lets each query see the next token (tril(1)): a leak",
            "causal mask 让每个查询看到了下一个 token（tril(1)）：信息泄漏",
        ),
        _CAUSAL,
        (
            "tril() with diagonal 0: key j is visible to query i only when j <= i",
            "tril() 用 diagonal=0：只有 j <= i 时键 j 对查询 i 可见",
        ),
        lambda e: (lambda t: _causal(t, diagonal=1)) if e == "causal_mask" else None,
        ("tril", "triu"),
        None,
        r"triu|tril",
    ),
)


# ------------------------------------------------------------------------------------------------ sinusoidal


def _sinusoidal(max_len, d_model, *, bad=None):
    pos = torch.arange(max_len, dtype=torch.float64)[:, None] + (1 if bad == "from_one" else 0)  # (P, 1)
    k = torch.arange(d_model, dtype=torch.float64)  # (D,)
    pair = k - k % 2 if bad != "index_not_pair" else k  # 2i for both dimensions of a pair
    pair = {"i_over_d": pair / 2, "doubled": pair * 2, "integer": torch.zeros_like(pair)}.get(bad or "", pair)
    angle = pos / 10000 ** (pair / d_model)  # (P, D)
    if bad == "halves":
        half = pos / 10000 ** (torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)  # (P, D/2)
        return torch.cat([half.sin(), half.cos()], dim=-1)  # (P, D)
    even = k % 2 == 0
    if bad == "swapped":
        return torch.where(even, angle.cos(), angle.sin())
    return torch.where(even, angle.sin(), angle.cos())


def sinusoidal_calls() -> list[Call]:
    return [Call("sinusoidal_encoding", (11, 8)), Call("sinusoidal_encoding", (3, 6))]


_PE = (
    "PE(pos, 2i) = sin(pos / 10000^(2i/d_model))  PE(pos, 2i+1) = cos(pos / 10000^(2i/d_model))",
    "PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d_model))",
)
SINUSOIDAL = (
    Pitfall(
        "sin_cos_swapped",
        ("cosines on the even dimensions and sines on the odd ones", "偶数维用了余弦、奇数维用了正弦"),
        _PE,
        ("pe[:, 0::2] = sin(angle); pe[:, 1::2] = cos(angle)", "pe[:, 0::2] = sin(angle)；pe[:, 1::2] = cos(angle)"),
        lambda e: lambda max_len, d_model: _sinusoidal(max_len, d_model, bad="swapped"),
        ("sin", "cos"),
        None,
        r"\bcos\b",
    ),
    Pitfall(
        "exponent_uses_dimension_index",
        (
            "the exponent uses each dimension's own index k, not the pair's 2i: the "
            "sine and cosine of a pair get different frequencies",
            "指数用了每一维自己的下标 k 而不是这对维度共同的 2i：同一对的正弦和余弦频率不同",
        ),
        _PE,
        (
            "both dimensions 2i and 2i+1 use 10000^(2i/d): torch.arange(0, d, 2)",
            "第 2i 和 2i+1 维都用 10000^(2i/d)：torch.arange(0, d, 2)",
        ),
        lambda e: lambda max_len, d_model: _sinusoidal(max_len, d_model, bad="index_not_pair"),
        ("pow", "__pow__", "__rpow__", "exp", "float_power"),
        None,
        r"10000|\*\*|pow|exp\(",
    ),
    Pitfall(
        "halves_not_interleaved",
        (
            "sines in the first half and cosines in the second (concatenated), not interleaved",
            "前一半是正弦、后一半是余弦（拼接），而不是交错排列",
        ),
        _PE,
        ("sines go to the even dimensions 0, 2, 4, ...: pe[:, 0::2]", "正弦放在偶数维 0, 2, 4, ……：pe[:, 0::2]"),
        lambda e: lambda max_len, d_model: _sinusoidal(max_len, d_model, bad="halves"),
        ("cat", "concat", "stack"),
        None,
        r"\bcat\b|concat|stack",
    ),
    Pitfall(
        "exponent_i_over_d",
        (
            "the exponent is i/d with i the pair's number (0, 1, 2, ...): the post's 2i is the "
            "even dimension itself (0, 2, 4, ...), so every frequency is too high",
            "指数写成了 i/d，i 是第几对（0, 1, 2, ……）：原文的 2i 是偶数维本身（0, 2, 4, ……），所以每个频率都偏高",
        ),
        _PE,
        (
            "10000 ** (torch.arange(0, d, 2) / d): the exponent runs over 0, 2, 4, ... divided by d",
            "10000 ** (torch.arange(0, d, 2) / d)：指数是 0, 2, 4, …… 除以 d",
        ),
        lambda e: lambda max_len, d_model: _sinusoidal(max_len, d_model, bad="i_over_d"),
        ("pow", "__pow__", "__rpow__", "exp", "float_power"),
        None,
        r"10000|\*\*|pow|exp\(",
    ),
    Pitfall(
        "exponent_doubled",
        (
            "the exponent is 2·2i/d: the even dimension 2i was doubled again, so the frequencies "
            "fall off twice as fast",
            "指数写成了 2·2i/d：偶数维 2i 又乘了一次 2，频率衰减快了一倍",
        ),
        _PE,
        (
            "arange(0, d, 2) already is 2i: divide it by d, without another factor 2",
            "arange(0, d, 2) 已经是 2i：直接除以 d，不要再乘 2",
        ),
        lambda e: lambda max_len, d_model: _sinusoidal(max_len, d_model, bad="doubled"),
        ("pow", "__pow__", "__rpow__", "exp", "float_power", "mul", "__mul__", "__rmul__"),
        None,
        r"10000|\*\*|pow|exp\(",
    ),
    Pitfall(
        "integer_division",
        (
            "2i // d is an integer division: it is 0 for every dimension, so every frequency is 1 "
            "and all dimensions repeat sin(pos), cos(pos)",
            "2i // d 是整数除法：每一维都得 0，于是所有频率都是 1，每一对维度都重复 sin(pos)、cos(pos)",
        ),
        _PE,
        (
            "divide with / (a float), not //: 10000 ** (2 * i / d_model)",
            "用 / 做除法（得到小数），不要用 //：10000 ** (2 * i / d_model)",
        ),
        lambda e: lambda max_len, d_model: _sinusoidal(max_len, d_model, bad="integer"),
        ("floor_divide", "__floordiv__", "__rfloordiv__", "div"),
        None,
        r"//.*(\*\*|10000|pow)|(\*\*|10000|pow).*//",
    ),
    Pitfall(
        "positions_from_one",
        ("positions start at 1, not 0", "位置从 1 开始而不是 0"),
        (_PE[0] + "其中pos是词在序列中的位置", _PE[1] + ", where pos is the word's position in the sequence"),
        ("torch.arange(max_len): the first position is 0", "torch.arange(max_len)：第一个位置是 0"),
        lambda e: lambda max_len, d_model: _sinusoidal(max_len, d_model, bad="from_one"),
        ("arange",),
        None,
        r"arange|range\(|\+ *1",
    ),
)


@dataclass(frozen=True)
class FunctionExercise:
    calls: Callable[[], list[Call]]
    reference: dict[str, Callable]
    pitfalls: tuple[Pitfall, ...]


FUNCTION_EXERCISES = {
    "attention": FunctionExercise(
        attention_calls, {"attention": lambda q, k, v, mask=None: _ref_attention(q, k, v, mask)}, ATTENTION
    ),
    "heads": FunctionExercise(heads_calls, {"split_heads": _split, "merge_heads": _merge}, HEADS),
    "masks": FunctionExercise(masks_calls, {"padding_mask": _padding, "causal_mask": _causal}, MASKS),
    "sinusoidal": FunctionExercise(sinusoidal_calls, {"sinusoidal_encoding": _sinusoidal}, SINUSOIDAL),
}
