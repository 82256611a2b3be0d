"""Grading of the LayerNorm exercise (§4.2): the post's formula in training and evaluation, eps honoured, gamma and
beta learnable and started at ones and zeros.

The learner's module is built, moved to float64 and run on ``x: (B, T, D) = (2, 5, 6)`` (one token constant, to
see whether eps is there). Its gain and bias are the two ``(D,)`` parameters whatever their names, set to random
values and tried in both roles. The output must equal the formula in evaluation and in training mode (a BatchNorm
differs there), with the eps the module is built with (a second build with eps = 0.1), and the parameters must
start at ones (gamma) and zeros (beta). A pitfall is the named wrong formula that reproduces the learner's output.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from anatomy.course import exercises as ex
from anatomy.course.compare import lowered_tol, max_diff, same, table_of
from anatomy.course.grader import Result, Subject, check_signature, run_guarded
from anatomy.course.module_probe import EPS, SIZES, Wrong, _build, _probe, _say_wrong, _source_at
from anatomy.tracing.steps import Recording

_LN_POST = (
    "LayerNorm(x) = gamma * (x - mean) / sqrt(var + eps) + beta……大家在复现时最好确认一下标准化是在最后一个维度上做的。",
    "LayerNorm(x) = gamma * (x - mean) / sqrt(var + eps) + beta ... make sure the normalisation runs over the "
    "last dimension.",
)


def _layer_norm(
    x: torch.Tensor,
    g: torch.Tensor,
    b: torch.Tensor,
    *,
    dims: tuple[int, ...] = (-1,),
    unbiased: bool = False,
    eps_outside: bool = False,
    eps: float = EPS,
    var_dims: tuple[int, ...] | None = None,
    running: bool = False,
) -> torch.Tensor:
    """The post's LayerNorm, or a wrong one: statistics over other ``dims`` (the variance over ``var_dims``), the
    unbiased variance, eps outside the root, or BatchNorm's running statistics at evaluation (``running``)."""
    if running:  # a fresh BatchNorm in eval: running mean 0, running variance 1
        return g * x / math.sqrt(1 + eps) + b
    mean = x.mean(dims, keepdim=True)
    var = x.var(var_dims or dims, keepdim=True, unbiased=unbiased)
    scale = var.sqrt() + eps if eps_outside else (var + eps).sqrt()
    return g * (x - mean) / scale + b


LN_WRONG: tuple[tuple[Wrong, dict[str, Any]], ...] = (
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


def _named(name: str, ops: tuple[str, ...], out_dims: tuple[str, ...] | None = None) -> Wrong:
    """A wrong LayerNorm whose words are its pitfall record's (``anatomy.pitfalls.records``)."""
    from anatomy.pitfalls import records

    r = records.get(name)
    assert r is not None, name
    hint = (r.hint_en, r.hint_zh) if r.hint_en and r.hint_zh else BN_HINT
    return Wrong(name, (r.summary_en, r.summary_zh), (r.post_zh or _LN_POST[0], ""), hint, ops, out_dims)


BN_HINT = (
    "nn.LayerNorm(d_model), or mean and var over the last dimension by hand: x.mean(-1, keepdim=True)",
    "nn.LayerNorm(d_model)，或手写时在最后一维上求均值和方差：x.mean(-1, keepdim=True)",
)
_STATS = ("var", "std", "var_mean", "std_mean", "mean", "pow", "__pow__")
LN_WRONG += (
    (_named("batchnorm_instead_of_layernorm", ("batch_norm",)), dict(running=True)),
    (_named("variance_over_whole_tensor", _STATS, ()), dict(var_dims=(0, 1, 2), unbiased=True)),
    (_named("variance_over_whole_tensor", _STATS, ()), dict(var_dims=(0, 1, 2))),
    (_named("eps_ignored", ("sqrt", "rsqrt", "add", "__add__", "div", "__truediv__")), dict(eps=1e-6)),
    (_named("eps_ignored", ("sqrt", "rsqrt", "add", "__add__", "div", "__truediv__")), dict(eps=1e-8)),
    (_named("eps_ignored", ("sqrt", "rsqrt", "add", "__add__", "div", "__truediv__")), dict(eps=1e-12)),
)
TRAIN_WRONG = (  # what training mode may compute instead (the statistics of a batch)
    (_named("batchnorm_instead_of_layernorm", ("batch_norm",)), dict(dims=(0, 1))),
)


def _no_affine(result: Result, cls: type[nn.Module], path: str, count: int) -> Result:
    import inspect

    try:
        line = inspect.getsourcelines(cls.__init__)[1]
    except (OSError, TypeError):
        line = None
    result.pitfall = "no_affine"
    if line:
        result.point(line, _source_at(path, line))
    what = (
        f"LayerNorm has {count} learnable parameter(s) of shape (D,); gamma and beta are two",
        f"LayerNorm 只有 {count} 个形状为 (D,) 的可学习参数；gamma 和 beta 应当是两个",
    )
    hint = (
        "self.gamma = nn.Parameter(torch.ones(d_model)); self.beta = nn.Parameter(torch.zeros(d_model))",
        "self.gamma = nn.Parameter(torch.ones(d_model))；self.beta = nn.Parameter(torch.zeros(d_model))",
    )
    result.brief(*what)
    result.brief(f"the post: 「{_LN_POST[0]}」", f"原文：「{_LN_POST[0]}」")
    result.brief(f"hint: {hint[0]}", f"提示：{hint[1]}")
    at = (f" (its __init__ at line {line})", f"（__init__ 在第 {line} 行）") if line else ("", "")
    result.say(f"pitfall `no_affine` — {what[0]}{at[0]}", f"坑 `no_affine` —— {what[1]}{at[1]}")
    result.say(f"the post: 「{_LN_POST[0]}」 ({_LN_POST[1]})", f"原文：「{_LN_POST[0]}」")
    result.say(f"hint: {hint[0]}", f"提示：{hint[1]}")
    return result


def _vectors(ln: nn.Module) -> list[tuple[str, nn.Parameter]]:
    """The parameters that hold one value per feature: (D,), or (1, 1, D) for broadcasting."""
    return [(n, p) for n, p in ln.named_parameters() if p.numel() == SIZES["D"] and p.shape[-1] == SIZES["D"]]


def _set(vectors: list[tuple[str, nn.Parameter]], values: list[torch.Tensor]) -> None:
    with torch.no_grad():
        for (_, p), v in zip(vectors, values):
            p.copy_(v.reshape(p.shape))


def _run(ln: nn.Module, x: torch.Tensor, timeout: float | None, train: bool) -> tuple[Any, Recording | None]:
    what = ("LayerNorm.forward(x (2, 5, 6))", "LayerNorm.forward(x (2, 5, 6))")
    ln.train(train)
    try:
        if train:
            return run_guarded(ln, (x,), what, timeout, record=False)[0], None
        return run_guarded(ln, (x,), what, timeout, dims=("B T D",), sizes=SIZES)
    finally:
        ln.eval()


def grade_layernorm(exercise: ex.Exercise, module: Subject, timeout: float | None) -> Result:
    path, cls = module.file, module.LayerNorm
    check_signature(cls.__init__, "LayerNorm.__init__", ["d_model", "eps"], 1)
    ln = _build(cls, (SIZES["D"],), "LayerNorm", timeout)
    result = Result(exercise.id, path, passed=False)
    vectors = _vectors(ln)
    if len(vectors) < 2:
        return _no_affine(result, cls, path, len(vectors))
    initial = [p.detach().clone().reshape(-1) for _, p in vectors]  # as the learner's __init__ made them
    g = torch.Generator().manual_seed(3)
    values = [torch.randn(SIZES["D"], generator=g, dtype=torch.float64) for _ in vectors]
    _set(vectors, values)
    x = _probe()
    out, rec = _run(ln, x, timeout, train=False)
    result.table = table_of(rec, path)
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != tuple(x.shape):
        result.pitfall = "wrong_shape"
        got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        result.say(
            f"LayerNorm returned {got}; a norm keeps the shape (B, T, D) = {tuple(x.shape)}",
            f"LayerNorm 返回了 {got}；归一化不改变形状 (B, T, D) = {tuple(x.shape)}",
        )
        return result
    trained, _ = _run(ln, x, timeout, train=True)
    eps = float(getattr(ln, "eps", EPS)) if isinstance(getattr(ln, "eps", None), (int, float)) else EPS
    roles = [(0, 1), (1, 0)]
    tol = max(1e-9, lowered_tol(rec) or 0.0)  # a norm that computes in float32 on purpose is judged at float32
    for gi, bi in roles:
        want = _layer_norm(x, values[gi], values[bi], eps=eps)
        if same(out, want, tol=tol) and same(trained, want, tol=tol):
            return _rules(result, cls, path, rec, timeout, (gi, bi), initial, values, tol) or _passed(result, eps)
    for o, table in ((out, LN_WRONG), (trained, TRAIN_WRONG)):
        for wrong, kw in table:
            for gi, bi in roles:
                try:
                    want = _layer_norm(x, values[gi], values[bi], **{"eps": eps, **kw})
                except RuntimeError:
                    continue
                if same(o, want, tol=tol):
                    return _say_wrong(
                        result, wrong, rec, path, max_diff(o, _layer_norm(x, values[gi], values[bi], eps=eps))
                    )
    return _unexplained(result, exercise, out, trained, x, values, eps, rec, path)


def _rules(
    result: Result,
    cls: type[nn.Module],
    path: str,
    rec: Recording | None,
    timeout: float | None,
    roles: tuple[int, int],
    initial: list[torch.Tensor],
    values: list[torch.Tensor],
    tol: float,
) -> Result | None:
    """Right on the probe: the eps it is built with is the one it uses, and gamma and beta start at 1 and 0."""
    other = _build(cls, (SIZES["D"], 0.1), "LayerNorm", timeout)  # eps = 0.1: far from any default
    vectors = _vectors(other)
    if len(vectors) == len(values):
        _set(vectors, values)
        x = _probe()
        got, _ = _run(other, x, timeout, train=False)
        want = _layer_norm(x, values[roles[0]], values[roles[1]], eps=0.1)
        if isinstance(got, torch.Tensor) and not same(got, want, tol=tol):
            wrong = next(w for w, kw in LN_WRONG if w.name == "eps_ignored")
            return _say_wrong(result, wrong, rec, path, max_diff(got, want))
    gamma, beta = initial[roles[0]], initial[roles[1]]
    if bool((gamma == 1).all()) and bool((beta == 0).all()):
        return None
    swapped = bool((gamma == 0).all()) and bool((beta == 1).all())
    return _init(result, cls, path, "norm_init_swapped" if swapped else "norm_init_wrong")


def _init(result: Result, cls: type[nn.Module], path: str, name: str) -> Result:
    """gamma or beta started at the wrong values: the line in __init__ that makes them."""
    import inspect
    import re

    from anatomy.course import block_words

    try:
        lines, start = inspect.getsourcelines(cls.__init__)
    except (OSError, TypeError):
        lines, start = [], 0
    pick = next(
        (
            (start + i, t.strip())
            for i, t in enumerate(lines)
            if re.search(r"ones|zeros|full|fill|randn|rand\(|init\.", t)
        ),
        (None, ""),
    )
    f = block_words.finding(name, pick[0], pick[1])
    wrong = Wrong(name, f.what, f.post, f.hint, ())
    result.point(*pick)
    result.pitfall = name
    result.brief(*wrong.what)
    result.brief(f"the post: 「{wrong.post[0]}」", f"原文：「{wrong.post[0]}」")
    result.brief(f"hint: {wrong.hint[0]}", f"提示：{wrong.hint[1]}")
    where = (f"line {pick[0]} `{pick[1]}`: ", f"第 {pick[0]} 行 `{pick[1]}`：") if pick[0] else ("", "")
    result.say(f"pitfall `{name}` — {where[0]}{wrong.what[0]}", f"坑 `{name}` —— {where[1]}{wrong.what[1]}")
    result.say(f"hint: {wrong.hint[0]}", f"提示：{wrong.hint[1]}")
    return result


def _passed(result: Result, eps: float) -> Result:
    result.passed = True
    result.say(
        "matches gamma * (x - mean) / sqrt(var + eps) + beta over the last dimension in evaluation and training "
        f"(float64, random gamma and beta, one constant token; eps={eps:g}, and eps=0.1 when built with it); "
        "gamma starts at ones, beta at zeros",
        "在评估和训练模式下都与最后一维上的 gamma * (x - mean) / sqrt(var + eps) + beta 一致（float64，随机 gamma 和 beta，"
        f"含一个常数 token；eps={eps:g}，以 eps=0.1 构造时也一致）；gamma 初值为 1，beta 初值为 0",
    )
    return result


def _unexplained(
    result: Result,
    exercise: ex.Exercise,
    out: torch.Tensor,
    trained: object,
    x: torch.Tensor,
    values: list[torch.Tensor],
    eps: float,
    rec: Recording | None,
    path: str,
) -> Result:
    from anatomy.course.compare import first_step

    roles = [(values[0], values[1]), (values[1], values[0])]
    diff = min(max_diff(out, _layer_norm(x, g_, b_, eps=eps)) for g_, b_ in roles)
    mode, mode_zh = ("evaluation", "评估") if diff > 1e-9 else ("training", "训练")
    if diff <= 1e-9:
        diff = min(max_diff(trained, _layer_norm(x, g_, b_, eps=eps)) for g_, b_ in roles)
    step = first_step(rec, ("div", "__truediv__", "mul", "__mul__", "add", "__add__", "layer_norm"), None, path)
    result.pitfall = "unexplained"
    if step is not None:
        result.point(step.line, step.source)
    en = (
        f"in {mode} mode your output differs from gamma * (x - mean) / sqrt(var + eps) + beta by up to {diff:.3g}, "
        f"and no known pitfall ({', '.join(sorted({w.name for w, _ in LN_WRONG}))}) reproduces it"
    )
    zh = f"在{mode_zh}模式下你的输出与 gamma * (x - mean) / sqrt(var + eps) + beta 最多相差 {diff:.3g}，已知的坑都解释不了"
    result.brief(en, zh)
    result.brief(f"hint: {exercise.hint[0]}", f"提示：{exercise.hint[1]}")
    result.say(en, zh)
    result.say(f"hint: {exercise.hint[0]}", f"提示：{exercise.hint[1]}")
    return result
