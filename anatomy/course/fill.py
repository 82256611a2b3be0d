"""The post's ``-1e9`` pitfall: a mask fill that float16 cannot hold, found in the learner's source and tried.

The post wrote ``-inf`` as ``-1e9`` and regretted it ("数值上-1e9虽然能近似无穷小但在某些情况下残留的微小概率还是会被模型利用到。
建议直接用-inf。"). In float64 the two give the same weights, so the probes cannot tell; in float16 (largest finite
value 65504) ``-1e9`` is no number at all. The grader finds a negative literal beyond float16's range in the
learner's code, runs their code in float16 and says what the fill does there: ``masked_fill`` refuses it, an
additive mask turns into ``-inf * 0 = NaN``, or the scores silently become float32.
"""

from __future__ import annotations

import linecache
import math
import re
from collections.abc import Callable

import torch

from anatomy.course.grader import Result, Subject
from anatomy.doctor.loading.subject import one_line

FLOAT16_MAX = 65504.0
_NUMBER = re.compile(r"-\s*(\d+(?:\.\d*)?(?:[eE]\+?\d+)?)\b")
POST = (
    "我一开始图省事把-inf写成了-1e9……数值上-1e9虽然能近似无穷小但在某些情况下残留的微小概率还是会被模型利用到。建议直接用-inf。",
    "I first wrote -inf as -1e9 to save effort ... numerically -1e9 only approximates minus infinity, and the tiny "
    "probability left over can still be used by the model. Use -inf directly.",
)


def big_fill(subject: Subject, low: float = FLOAT16_MAX, high: float = float("inf")) -> tuple[int, str, float] | None:
    """``(line, source, value)`` of the first negative number in the learner's code whose size is beyond ``low``
    (float16's range) and at most ``high``: a literal (``-1e9``, ``-9e15``), an expression of literals
    (``-2**32+1``, ``-10**9``, ``float('-1e9')``) or a number subtracted (``scores - 1e9 * (1 - mask)``);
    comments and strings left out. None when there is none."""
    lines = linecache.getlines(subject.file)
    found = [(n, -v) for n, v in _constants("".join(lines)) if math.isfinite(v) and low < -v <= high]
    for number, text in enumerate(lines, start=1):
        code = re.sub(r"(\"[^\"]*\"|'[^']*')", "", text.split("#")[0])
        for m in _NUMBER.finditer(code):
            try:
                value = float(m.group(1))
            except ValueError:
                continue
            if low < value <= high:
                found.append((number, value))
    if not found:
        return None
    number, value = min(found)
    return number, lines[number - 1].strip(), -value


def _constants(source: str) -> list[tuple[int, float]]:
    """``(line, value)`` of every largest expression made of number literals only (``-2**32+1``, ``-1e9``,
    ``float('-1e9')``), evaluated; the learner's code is parsed, never run."""
    import ast

    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    out: list[tuple[int, float]] = []
    seen: set[int] = set()
    for node in ast.walk(tree):
        if id(node) in seen or not isinstance(node, (ast.UnaryOp, ast.BinOp, ast.Call)):
            continue
        value = _value(node)
        if value is None:
            continue
        seen.update(id(n) for n in ast.walk(node))
        out.append((node.lineno, value))
    return out


def _value(node: object) -> float | None:  # an ast node
    """The number an expression of literals makes (+ - * / ** and float('...')), else None."""
    import ast

    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return float(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        inner = _value(node.operand)
        return None if inner is None else (-inner if isinstance(node.op, ast.USub) else inner)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "float" and node.args:
        arg = node.args[0]
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            try:
                return float(arg.value)
            except ValueError:
                return None
        return _value(arg)
    if isinstance(node, ast.BinOp):
        a, b = _value(node.left), _value(node.right)
        if a is None or b is None:
            return None
        try:
            if isinstance(node.op, ast.Pow):
                return float(a**b) if abs(b) <= 64 and abs(a) <= 1e6 else None
            ops = {ast.Add: a + b, ast.Sub: a - b, ast.Mult: a * b}
            if type(node.op) in ops:
                return float(ops[type(node.op)])
            if isinstance(node.op, ast.Div) and b:
                return a / b
        except (OverflowError, ZeroDivisionError):
            return None
    return None


def shown(value: float) -> str:
    """-1e9 as the learner wrote it (not -1e+09)."""
    exponent = round(math.log10(-value)) if value < 0 else 0
    return f"-1e{exponent}" if value < 0 and -value == 10.0**exponent else f"{value:g}"


def warn_finite(result: Result, subject: Subject) -> None:
    """A pass with a finite fill float16 can hold (-1e4, -10000): right here, but not the post's advice."""
    found = big_fill(subject, 999.0, FLOAT16_MAX)
    if found is not None:
        line, _, value = found
        result.warn(
            f"line {line} fills hidden scores with {shown(value)}: it works here, but the post advises float('-inf') "
            "(a row with every key hidden then gets even weights instead of none)",
            f"第 {line} 行用 {shown(value)} 填充被遮住的分数：这里没问题，但原文建议用 float('-inf')（全部被遮住的一行会得到"
            "平均的权重，而不是没有权重）",
        )


def float16_outcome(run: Callable[[], object]) -> tuple[str, str]:
    """What the learner's code does in float16: ``run()`` calls it on float16 inputs."""
    try:
        out = run()
    except Exception as err:  # noqa: BLE001 - the learner's code in float16 may raise anything
        if "without overflow" in str(err):
            return (
                'in float16 torch refuses the number ("value cannot be converted to type c10::Half without '
                'overflow"): the code stops there',
                "在 float16 下 torch 直接拒绝这个数（“value cannot be converted "
                "to type c10::Half without overflow”，即这个数放不进 float16）：代码在这里就停了",
            )
        text = err.en if hasattr(err, "en") else one_line(err, 160)
        return (f"in float16 it does not run: {text}", f"在 float16 下它跑不起来：{text}")
    first = out[0] if isinstance(out, (tuple, list)) else out
    if not isinstance(first, torch.Tensor):
        return "", ""
    if first.dtype != torch.float16:
        return (
            f"in float16 the fill turns the result into {first.dtype}: the number does not fit in float16",
            f"在 float16 下这个填充值把结果变成了 {first.dtype}：这个数放不进 float16",
        )
    if bool(first.isnan().any()):
        return (
            "in float16 the fill becomes -inf and the output holds NaN (an additive mask computes -inf * 0)",
            "在 float16 下填充值变成 -inf，输出里出现 NaN（加性掩码会算出 -inf * 0）",
        )
    return (
        "in float16 the fill silently becomes -inf: it is -inf that the code relies on, so write float('-inf')",
        "在 float16 下填充值悄悄变成了 -inf：代码真正依赖的就是 -inf，那就直接写 float('-inf')",
    )


def name_it(result: Result, found: tuple[int, str, float], outcome: tuple[str, str]) -> Result:
    line, source, value = found
    result.passed = False
    result.point(line, source)
    what = (
        f"the mask fill {shown(value)} is not a float16 number (float16 stops at -65504); {outcome[0]}",
        f"掩码填充值 {shown(value)} 不是 float16 能表示的数（float16 最小到 -65504）；{outcome[1]}",
    )
    hint = (
        "fill with float('-inf') (the post's advice) or torch.finfo(scores.dtype).min, which follow the dtype",
        "用 float('-inf')（原文的建议）或 torch.finfo(scores.dtype).min 填充，它们随数据类型变化",
    )
    numbers = (
        "numbers: in float64 your output equals the reference (exp(-1e9) is exactly 0 there); the check ran "
        "your code once more in float16",
        "数字：在 float64 下你的输出与参考实现一致（exp(-1e9) 在那里正好是 0）；检查又在 float16 下运行了一次你的代码",
    )
    where = (f"line {line} `{source}`: ", f"第 {line} 行 `{source}`：")
    result.tell("fill_minus_1e9", what, POST, hint, where=where, numbers=numbers)
    return result
