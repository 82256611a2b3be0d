"""The masks (§2.4) and sinusoidal table (§3.2) exercises: their probes, references and pitfalls."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from anatomy.course.probe import SIZES, Call, Pitfall, from_record

# ------------------------------------------------------------------------------------------------ masks


def _padding(lengths: torch.Tensor | Sequence[int], max_len: int, *, bad: str | None = None) -> torch.Tensor:
    lengths = torch.as_tensor(lengths)
    real = torch.arange(max_len)[None, :] < lengths[:, None]  # (B, S)
    if bad == "inverted":
        return ~real
    if bad == "left":
        return real.flip(-1)
    if bad == "off_by_one":
        return torch.arange(max_len)[None, :] <= lengths[:, None]
    if bad == "drops_last":
        return torch.arange(max_len)[None, :] < lengths[:, None] - 1
    return real


def _causal(t: int, *, diagonal: int = 0, upper: bool = False) -> torch.Tensor:
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
MASKS: tuple[Pitfall, ...] = (
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


def _sinusoidal(max_len: int, d_model: int, *, bad: str | None = None) -> torch.Tensor:
    pos = torch.arange(max_len, dtype=torch.float64)[:, None] + (1 if bad == "from_one" else 0)  # (P, 1)
    pos = {"squashed": pos / max_len, "squashed_1": pos / max(max_len - 1, 1)}.get(bad or "", pos)
    k = torch.arange(d_model, dtype=torch.float64)  # (D,)
    pair = k - k % 2 if bad != "index_not_pair" else k  # 2i for both dimensions of a pair
    pair = {"i_over_d": pair / 2, "doubled": pair * 2, "integer": torch.zeros_like(pair)}.get(bad or "", pair)
    angle = _angle(pos, pair, d_model, bad)  # (P, D)
    if bad == "halves":
        half = pos / 10000 ** (torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)  # (P, D/2)
        return torch.cat([half.sin(), half.cos()], dim=-1)  # (P, D)
    even = k % 2 == 0
    if bad == "swapped":
        return torch.where(even, angle.cos(), angle.sin())
    return torch.where(even, angle.sin(), angle.cos())


def _angle(pos: torch.Tensor, pair: torch.Tensor, d_model: int, bad: str | None) -> torch.Tensor:
    """pos / 10000^(2i/d), or one of the slips: precedence, the base 10e4, a product, another grid."""
    if bad == "precedence":
        return pos / 10000**2 * pair / d_model  # pos / 10000 ** 2 * i / d
    if bad == "precedence_power":
        return pos / 10000**pair / d_model  # pos / 10000 ** i / d
    if bad == "base_10e4":
        return pos / 10e4 ** (pair / d_model)
    if bad == "times":
        return pos * 10000 ** (pair / d_model)
    if bad == "linspace":
        grid = torch.linspace(0, 1, d_model // 2, dtype=torch.float64).repeat_interleave(2)  # ends at 1
        return pos / 10000**grid
    return pos / 10000 ** (pair / d_model)


def sinusoidal_calls() -> list[Call]:
    return [Call("sinusoidal_encoding", (11, 8)), Call("sinusoidal_encoding", (3, 6))]


_PE = (
    "PE(pos, 2i) = sin(pos / 10000^(2i/d_model))  PE(pos, 2i+1) = cos(pos / 10000^(2i/d_model))",
    "PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d_model))",
)
SINUSOIDAL: tuple[Pitfall, ...] = (
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

MASKS += (
    Pitfall(
        "padding_off_by_one",
        (
            "the padding mask hides the last real token of each row (< length - 1, or positions counted from 1)",
            "padding mask 把每行最后一个真实 token 也遮住了（< length - 1，或位置从 1 开始数）",
        ),
        ("Padding Mask用于把无效的padding位遮掉", "the padding mask hides the invalid padding positions"),
        (
            "positions 0 .. length-1 are real: torch.arange(max_len) < length",
            "位置 0 .. length-1 是真实的：torch.arange(max_len) < length",
        ),
        lambda e: (
            (lambda lengths, max_len: _padding(lengths, max_len, bad="drops_last")) if e == "padding_mask" else None
        ),
        ("lt", "__lt__", "sub", "__sub__", "rsub", "__rsub__", "gt", "__gt__", "arange"),
        None,
        r"<|>|arange|- *1",
    ),
)


def _slip(bad: str) -> Callable[[str], Callable[[int, int], torch.Tensor]]:
    return lambda e: lambda max_len, d_model: _sinusoidal(max_len, d_model, bad=bad)


_POWER = ("pow", "__pow__", "__rpow__", "exp", "float_power", "div", "__truediv__", "__rtruediv__")
SINUSOIDAL += (
    from_record("exponent_precedence", _slip("precedence"), _POWER, r"10000|\*\*|pow|exp\("),
    from_record("exponent_precedence", _slip("precedence_power"), _POWER, r"10000|\*\*|pow|exp\("),
    from_record("base_typo_10e4", _slip("base_10e4"), _POWER, r"10e4|100000|1e5"),
    from_record("multiplies_instead_of_divides", _slip("times"), _POWER + ("mul", "__mul__"), r"10000|exp\(|\*"),
    from_record("frequency_grid_wrong", _slip("linspace"), ("linspace", "arange") + _POWER, r"linspace|arange"),
    from_record("positions_normalised", _slip("squashed"), ("div", "__truediv__", "arange"), r"/ *max_len|arange"),
    from_record("positions_normalised", _slip("squashed_1"), ("div", "__truediv__", "arange"), r"/ *\(?max_len|arange"),
)
