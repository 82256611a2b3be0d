"""Words and numbers as the report writes them, shared by ``findings.py`` and ``found.py``: the mask senses
in short and in full, a number in 4 significant digits, the English or Chinese of a pair."""

from __future__ import annotations

import math
from typing import Any

SENSE_SHORT = {
    "bool_keep": ("bool True = keep", "布尔 True = 保留"),
    "bool_ignore": ("bool True = ignore", "布尔 True = 忽略"),
    "additive": ("additive float", "加性浮点"),
    "int_keep": ("0/1 integers", "0/1 整数"),
    "float_keep": ("0/1 floats", "0/1 浮点"),
}

SENSE_TEXT = {
    "bool_keep": ("bool, True = may attend", "布尔，True = 可以关注"),
    "bool_ignore": ("bool, True = ignore (padding)", "布尔，True = 忽略（padding）"),
    "additive": ("additive float (0 or a large negative number)", "加性浮点（0 或很大的负数）"),
    "int_keep": ("integers 0/1, 1 = may attend", "整数 0/1，1 = 可以关注"),
    "float_keep": ("floats 0/1, 1 = may attend", "浮点 0/1，1 = 可以关注"),
}


def fmt(v: Any) -> str:
    if v is None:
        return "n/a"
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return str(v)
    if isinstance(v, int):
        return str(v)
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "inf"
    if v == 0:
        return "0"
    return f"{v:.4g}" if 1e-3 <= abs(v) < 1e4 else f"{v:.1e}"


def _t(lang: str, en: str, zh: str) -> str:
    return zh if lang == "zh" else en
