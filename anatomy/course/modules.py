"""Grading of the module exercises that are not attention: LayerNorm (§4.2) and Add & Norm (§4.3).

The learner's module is built, moved to float64 and run on ``x: (B, T, D) = (2, 5, 6)`` (one token constant, to
see whether eps is there). Its parameters are found by shape, whatever their names: LayerNorm's gain and bias are
the two ``(D,)`` parameters, set to random values and tried in both roles. A pitfall is the named wrong formula
that reproduces the learner's output; the line is the learner's step that computes the statistic or the sum.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import torch
from torch import nn

from anatomy.course import exercises as ex
from anatomy.course import spec
from anatomy.course.grader import (
    LearnError,
    Result,
    Subject,
    check_signature,
    first_step,
    lowered_tol,
    max_diff,
    run_guarded,
    same,
    table_of,
)

SIZES = {"B": 2, "T": 5, "D": 6}
EPS = 1e-5


@dataclass(frozen=True)
class Wrong:
    name: str
    what: tuple[str, str]
    post: tuple[str, str]
    hint: tuple[str, str]
    ops: tuple[str, ...]


def _probe(seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(SIZES["B"], SIZES["T"], SIZES["D"], generator=g, dtype=torch.float64) * 3 + 1
    x[1, 2] = 0.5  # one constant token (exactly: 0.5 sums without rounding): variance 0, only eps keeps it finite
    return x


def _build(cls, args: tuple, name: str, timeout):
    what = (f"building {name}{args}", f"构造 {name}{args} 时")
    module, _ = run_guarded(lambda: cls(*args), (), what, timeout, record=False)
    if not isinstance(module, nn.Module):
        raise LearnError(
            f"{name}{args} made a {type(module).__name__}, not an nn.Module",
            f"{name}{args} 得到的是 {type(module).__name__}，不是 nn.Module",
        )
    return module.double().eval()


# ------------------------------------------------------------------------------------------------ LayerNorm

_LN_POST = (
    "LayerNorm(x) = gamma * (x - mean) / sqrt(var + eps) + beta……大家在复现时最好确认一下标准化是在最后一个维度上做的。",
    "LayerNorm(x) = gamma * (x - mean) / sqrt(var + eps) + beta ... make sure the normalisation runs over the "
    "last dimension.",
)


def _layer_norm(x, g, b, *, dims=(-1,), unbiased=False, eps_outside=False, eps=EPS):
    mean = x.mean(dims, keepdim=True)
    var = x.var(dims, keepdim=True, unbiased=unbiased)
    scale = var.sqrt() + eps if eps_outside else (var + eps).sqrt()
    return g * (x - mean) / scale + b


LN_WRONG = (
    (
        Wrong(
            "unbiased_variance",
            (
                "the variance is the unbiased one (divides by D-1): torch's x.var() and x.std() are "
                "unbiased unless told otherwise",
                "方差用了无偏估计（除以 D-1）：torch 的 x.var() 和 x.std() 默认是无偏的",
            ),
            _LN_POST,
            ("x.var(-1, keepdim=True, unbiased=False)", "x.var(-1, keepdim=True, unbiased=False)"),
            ("var", "std", "var_mean", "std_mean"),
        ),
        dict(unbiased=True),
    ),
    (
        Wrong(
            "eps_outside_sqrt",
            (
                "eps is added to the standard deviation, not inside the square root "
                "(the annotated transformer's (x - mean) / (std + eps))",
                "eps 加在了标准差上，而不是平方根里面（annotated transformer 的 (x - mean) / (std + eps)）",
            ),
            _LN_POST,
            ("torch.sqrt(var + self.eps)", "torch.sqrt(var + self.eps)"),
            ("add", "__add__", "div", "__truediv__"),
        ),
        dict(eps_outside=True),
    ),
    (
        Wrong(
            "annotated_transformer_form",
            (
                "(x - mean) / (std + eps) with the unbiased std: the annotated transformer's "
                "LayerNorm, a variant, not the post's formula (and not nn.LayerNorm)",
                "(x - mean) / (std + eps) 且 std 无偏：annotated transformer 的写法，是一种变体，"
                "但不是原文的公式（也不是 nn.LayerNorm）",
            ),
            _LN_POST,
            (
                "population variance, eps inside the root: (x - mean) / torch.sqrt(var + eps)",
                "总体方差，eps 放进根号：(x - mean) / torch.sqrt(var + eps)",
            ),
            ("std", "var"),
        ),
        dict(unbiased=True, eps_outside=True),
    ),
    (
        Wrong(
            "normalises_over_batch",
            (
                "the statistics are taken over the batch (dim 0), as BatchNorm does",
                "统计量在 batch 维（dim 0）上计算，像 BatchNorm 那样",
            ),
            _LN_POST,
            (
                "mean and var over the last dimension: x.mean(-1, keepdim=True)",
                "在最后一维上求均值和方差：x.mean(-1, keepdim=True)",
            ),
            ("mean", "var", "std", "var_mean"),
        ),
        dict(dims=(0,)),
    ),
    (
        Wrong(
            "normalises_over_positions",
            (
                "the statistics are taken over the positions (dim -2), not the features",
                "统计量在位置维（dim -2）上计算，而不是特征维",
            ),
            _LN_POST,
            (
                "mean and var over the last dimension: x.mean(-1, keepdim=True)",
                "在最后一维上求均值和方差：x.mean(-1, keepdim=True)",
            ),
            ("mean", "var", "std", "var_mean"),
        ),
        dict(dims=(-2,)),
    ),
    (
        Wrong(
            "normalises_over_everything",
            ("the statistics are taken over positions and features together", "统计量把位置和特征放在一起计算"),
            _LN_POST,
            ("per token: x.mean(-1, keepdim=True)", "按 token 计算：x.mean(-1, keepdim=True)"),
            ("mean", "var", "std"),
        ),
        dict(dims=(-2, -1)),
    ),
    (
        Wrong(
            "no_eps",
            (
                "there is no eps: a token whose features are all equal divides by 0",
                "没有 eps：特征全部相等的 token 会除以 0",
            ),
            _LN_POST,
            ("(x - mean) / torch.sqrt(var + self.eps)", "(x - mean) / torch.sqrt(var + self.eps)"),
            ("sqrt", "rsqrt", "div", "__truediv__"),
        ),
        dict(eps=0.0),
    ),
)


def _grade_layernorm(exercise: ex.Exercise, module: Subject, timeout) -> Result:
    path = module.file
    cls = module.LayerNorm
    check_signature(cls.__init__, "LayerNorm.__init__", ["d_model", "eps"], 1)
    ln = _build(cls, (SIZES["D"],), "LayerNorm", timeout)
    result = Result(exercise.id, path, passed=False)
    vectors = [(n, p) for n, p in ln.named_parameters() if tuple(p.shape) == (SIZES["D"],)]
    if len(vectors) < 2:
        result.pitfall = "no_affine"
        import inspect

        try:
            result.line = inspect.getsourcelines(cls.__init__)[1]
        except (OSError, TypeError):
            result.line = None
        at_en, at_zh = (
            (f" (its __init__ at line {result.line})", f"（__init__ 在第 {result.line} 行）")
            if result.line
            else ("", "")
        )
        if result.line:
            result.point(result.line, _source_at(path, result.line))
        result.brief(
            f"LayerNorm has {len(vectors)} learnable parameter(s) of shape (D,); gamma and beta are two",
            f"LayerNorm 只有 {len(vectors)} 个形状为 (D,) 的可学习参数；gamma 和 beta 应当是两个",
        )
        result.brief(f"the post: 「{_LN_POST[0]}」", f"原文：「{_LN_POST[0]}」")
        result.brief(
            "hint: self.gamma = nn.Parameter(torch.ones(d_model)); self.beta = nn.Parameter(torch.zeros(d_model))",
            "提示：self.gamma = nn.Parameter(torch.ones(d_model))；self.beta = nn.Parameter(torch.zeros(d_model))",
        )
        result.say(
            f"pitfall `no_affine` — LayerNorm has {len(vectors)} learnable parameter(s) of shape (D,){at_en}; "
            "gamma and beta are two",
            f"坑 `no_affine` —— LayerNorm 只有 {len(vectors)} 个形状为 (D,) 的可学习参数{at_zh}；gamma 和 beta 应当是两个",
        )
        result.say(f"the post: 「{_LN_POST[0]}」 ({_LN_POST[1]})", f"原文：「{_LN_POST[0]}」")
        result.say(
            "hint: self.gamma = nn.Parameter(torch.ones(d_model)); self.beta = nn.Parameter(torch.zeros(d_model))",
            "提示：self.gamma = nn.Parameter(torch.ones(d_model))；self.beta = nn.Parameter(torch.zeros(d_model))",
        )
        return result
    g = torch.Generator().manual_seed(3)
    values = [torch.randn(SIZES["D"], generator=g, dtype=torch.float64) for _ in vectors]
    with torch.no_grad():
        for (_, p), v in zip(vectors, values):
            p.copy_(v)
    x = _probe()
    out, rec = run_guarded(
        ln,
        (x,),
        ("LayerNorm.forward(x (2, 5, 6))", "LayerNorm.forward(x (2, 5, 6))"),
        timeout,
        dims=("B T D",),
        sizes=SIZES,
    )
    result.table = table_of(rec, path)
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != tuple(x.shape):
        result.pitfall = "wrong_shape"
        got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        result.say(
            f"LayerNorm returned {got}; a norm keeps the shape (B, T, D) = {tuple(x.shape)}",
            f"LayerNorm 返回了 {got}；归一化不改变形状 (B, T, D) = {tuple(x.shape)}",
        )
        return result
    eps = float(getattr(ln, "eps", EPS)) if isinstance(getattr(ln, "eps", None), (int, float)) else EPS
    roles = [(values[0], values[1]), (values[1], values[0])]
    tol = max(1e-9, lowered_tol(rec) or 0.0)  # a norm that computes in float32 on purpose is judged at float32
    for gain, bias in roles:
        if same(out, _layer_norm(x, gain, bias, eps=eps), tol=tol):
            result.passed = True
            result.say(
                "matches gamma * (x - mean) / sqrt(var + eps) + beta over the last dimension (float64, "
                f"random gamma and beta, one constant token; eps={eps:g})",
                f"与最后一维上的 gamma * (x - mean) / sqrt(var + eps) + beta 一致（float64，随机 gamma 和 beta，"
                f"含一个常数 token；eps={eps:g}）",
            )
            return result
    for wrong, kw in LN_WRONG:
        for gain, bias in roles:
            try:
                want = _layer_norm(x, gain, bias, **{"eps": eps, **kw})
            except RuntimeError:
                continue
            if same(out, want, tol=tol):
                return _say_wrong(result, wrong, rec, path, max_diff(out, _layer_norm(x, gain, bias, eps=eps)))
    result.pitfall = "unexplained"
    diff = min(max_diff(out, _layer_norm(x, g_, b_, eps=eps)) for g_, b_ in roles)
    result.say(
        f"differs from gamma * (x - mean) / sqrt(var + eps) + beta by up to {diff:.3g}, and no known pitfall "
        f"({', '.join(w.name for w, _ in LN_WRONG)}) reproduces it",
        f"与 gamma * (x - mean) / sqrt(var + eps) + beta 最多相差 {diff:.3g}，已知的坑都解释不了",
    )
    result.say(f"hint: {exercise.hint[0]}", f"提示：{exercise.hint[1]}")
    return result


def _source_at(path: str, line: int) -> str:
    import linecache

    return linecache.getline(path, line).strip()


def _say_wrong(result: Result, wrong: Wrong, rec, path: str, diff: float, who: str = "") -> Result:
    step = first_step(rec, wrong.ops, None, path)
    result.pitfall = wrong.name
    result.point(step.line if step else None, step.source if step else "")
    result.brief((f"{who}: " if who else "") + wrong.what[0], (f"{who}：" if who else "") + wrong.what[1])
    result.brief(f"the post: 「{wrong.post[0]}」", f"原文：「{wrong.post[0]}」")
    result.brief(f"hint: {wrong.hint[0]}", f"提示：{wrong.hint[1]}")
    where_en = f"line {step.line} `{step.source}`: " if step else ""
    where_zh = f"第 {step.line} 行 `{step.source}`：" if step else ""
    result.say(f"pitfall `{wrong.name}` — {where_en}{wrong.what[0]}", f"坑 `{wrong.name}` —— {where_zh}{wrong.what[1]}")
    result.say(f"the post: 「{wrong.post[0]}」 ({wrong.post[1]})", f"原文：「{wrong.post[0]}」")
    shown = "inf/NaN" if math.isinf(diff) else f"{diff:.3g}"
    result.say(
        f"numbers: your output differs from the reference by up to {shown} and equals the `{wrong.name}` "
        "version exactly",
        f"数字：你的输出与参考实现最多相差 {shown}，而与 `{wrong.name}` 版本完全一致",
    )
    result.say(f"hint: {wrong.hint[0]}", f"提示：{wrong.hint[1]}")
    return result


# ------------------------------------------------------------------------------------------------ Add & Norm

_POST_NORM = (
    "原论文的做法是每个Sublayer结束后先做Add再在最后统一做LayerNorm这种方式叫Post-Norm",
    "the paper adds after each sub-layer, then applies LayerNorm: Post-Norm",
)
_PRE_NORM = (
    "Pre-Norm先对输入做LayerNorm再进入Sublayer最后再做残差相加",
    "Pre-Norm applies LayerNorm to the input, then the sub-layer, and adds the residual last",
)
_RESIDUAL = (
    "每一层的输出都是“这层学到的变化”加上“上一层的原始输入”",
    "each layer's output is 'what this layer learned' plus 'the previous layer's original input'",
)
_TWICE = (
    "Norm放在残差之后又被重复使用训练曲线一路乱跳",
    "the norm sat after the residual and was used again: the curve jumped",
)


def _add_norm_wrong(placement: str):
    """(Wrong, formula(x, f, norm)) pairs for a PostNorm or PreNorm module."""
    post = placement == "post"
    right = _POST_NORM if post else _PRE_NORM
    hint = (
        ("self.norm(x + self.sublayer(x))", "self.norm(x + self.sublayer(x))")
        if post
        else ("x + self.sublayer(self.norm(x))", "x + self.sublayer(self.norm(x))")
    )
    adds = ("add", "__add__", "__radd__", "add_")
    table = [
        (
            Wrong(
                "missing_residual",
                ("the residual x is never added back", "残差 x 没有被加回来"),
                _RESIDUAL,
                hint,
                ("layer_norm",) if post else ("linear", "__call__"),
            ),
            (lambda x, f, n: n(f(x))) if post else (lambda x, f, n: f(n(x))),
        ),
        (
            Wrong(
                "pre_norm_instead" if post else "post_norm_instead",
                (
                    (
                        f"this is {'Pre' if post else 'Post'}-Norm: "
                        + ("x + sublayer(norm(x))" if post else "norm(x + sublayer(x))"),
                        f"这是 {'Pre' if post else 'Post'}-Norm："
                        + ("x + sublayer(norm(x))" if post else "norm(x + sublayer(x))"),
                    )
                ),
                right,
                hint,
                adds if post else ("layer_norm", "rms_norm"),
            ),
            (lambda x, f, n: x + f(n(x))) if post else (lambda x, f, n: n(x + f(x))),
        ),
        (
            Wrong(
                "norm_on_residual_path",
                (
                    "the normalised x is what gets added back: norm(x) + sublayer(norm(x))",
                    "加回去的是归一化后的 x：norm(x) + sublayer(norm(x))",
                ),
                _TWICE,
                hint,
                adds,
            ),
            lambda x, f, n: n(x) + f(n(x)),
        ),
        (
            Wrong(
                "norm_after_sublayer",
                (
                    "the norm is applied to the sub-layer's output: x + norm(sublayer(x))",
                    "Norm 作用在子层的输出上：x + norm(sublayer(x))",
                ),
                right,
                hint,
                adds,
            ),
            lambda x, f, n: x + n(f(x)),
        ),
        (
            Wrong(
                "norm_before_add",
                (
                    "norm(x) + sublayer(x): the input is normalised, the sub-layer sees the raw x",
                    "norm(x) + sublayer(x)：输入被归一化，子层却拿到原始 x",
                ),
                right,
                hint,
                adds,
            ),
            lambda x, f, n: n(x) + f(x),
        ),
    ]
    return [(w, fn) for w, fn in table if w.name != ("post_norm_instead" if post else "pre_norm_instead")]


def _grade_add_norm(exercise: ex.Exercise, module: Subject, timeout) -> Result:
    path = module.file
    result = Result(exercise.id, path, passed=False)
    x = _probe(1)
    x[1, 2] = torch.linspace(-1, 1, SIZES["D"], dtype=torch.float64)  # no constant token here
    torch.manual_seed(0)
    sub = nn.Sequential(nn.Linear(SIZES["D"], SIZES["D"]), nn.Tanh()).double()
    ok = []
    for name, placement in (("PostNorm", "post"), ("PreNorm", "pre")):
        cls = getattr(module, name)
        check_signature(cls.__init__, f"{name}.__init__", ["d_model", "sublayer"], 2)
        sub32 = copy.deepcopy(sub).float()
        m32 = _build(cls, (SIZES["D"], sub32), name, timeout).float()  # a global norm stays float32: audit there
        what = (f"{name}.forward(x (2, 5, 6))", f"{name}.forward(x (2, 5, 6))")
        found = spec.audit_structure(
            m32,
            lambda m32=m32, what=what: run_guarded(m32, (x.float(),), what, timeout, record=False, grad=True)[0],
            path,
            SIZES["D"],
            "add_norm",
            sub32,
        )
        if found is not None:
            from anatomy.course.doctor_exercises import _finding

            found.what = (f"{name}: {found.what[0]}", f"{name}：{found.what[1]}")
            return _finding(result, found)
        m = _build(cls, (SIZES["D"], sub), name, timeout)
        out, rec = run_guarded(
            m,
            (x,),
            (f"{name}.forward(x (2, 5, 6))", f"{name}.forward(x (2, 5, 6))"),
            timeout,
            dims=("B T D",),
            sizes=SIZES,
            module=m,
        )
        table = table_of(rec, path)
        norm, own = _learner_norm(m, sub)
        with torch.no_grad():
            reference = norm(x + sub(x)) if placement == "post" else x + sub(norm(x))
        tol = max(1e-9, lowered_tol(rec) or 0.0)
        if isinstance(out, torch.Tensor) and same(out, reference, tol=tol):
            ok.append((name, table))
            continue
        result.table = table
        if not own:
            result.pitfall = "no_norm"
            result.say(f"{name} has no norm module of its own", f"{name} 没有自己的 Norm 模块")
            return result
        with torch.no_grad():
            for wrong, fn in _add_norm_wrong(placement):
                if isinstance(out, torch.Tensor) and same(out, fn(x, sub, norm), tol=tol):
                    _say_wrong(result, wrong, rec, path, max_diff(out, reference), name)
                    result.messages["en"][0] = f"{name}: " + result.messages["en"][0]
                    result.messages["zh"][0] = f"{name}：" + result.messages["zh"][0]
                    return result
        result.pitfall = "unexplained"
        result.say(
            f"{name} differs from {'norm(x + sublayer(x))' if placement == 'post' else 'x + sublayer(norm(x))'}"
            f" by up to {max_diff(out, reference):.3g}, and no known pitfall reproduces it",
            f"{name} 与参考公式最多相差 {max_diff(out, reference):.3g}，已知的坑都解释不了",
        )
        result.say(f"hint: {exercise.hint[0]}", f"提示：{exercise.hint[1]}")
        return result
    result.passed, result.table = True, ok[0][1]
    result.say(
        "PostNorm = norm(x + sublayer(x)) and PreNorm = x + sublayer(norm(x)), each with its own norm "
        "(float64, a Linear + tanh sub-layer)",
        "PostNorm = norm(x + sublayer(x))，PreNorm = x + sublayer(norm(x))，各有自己的 Norm（float64，子层为 Linear + tanh）",
    )
    return result


def _learner_norm(m: nn.Module, sub: nn.Module) -> tuple[nn.Module, bool]:
    """``(norm, True)``: the learner's own norm (the first sub-module with parameters that is not the given
    sub-layer); else ``(nn.LayerNorm, False)``, for code that normalises with ``F.layer_norm`` directly."""
    inside = {id(s) for s in sub.modules()}
    for child in m.modules():
        if child is not m and id(child) not in inside and any(True for _ in child.parameters()):
            return child, True
    return nn.LayerNorm(SIZES["D"]).double(), False


def grade(exercise: ex.Exercise, subject: Subject, timeout) -> Result:
    return (
        _grade_layernorm(exercise, subject, timeout)
        if exercise.id == "layernorm"
        else _grade_add_norm(exercise, subject, timeout)
    )
