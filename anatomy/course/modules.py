"""Grading of the module exercises that are not attention: LayerNorm (§4.2) and Add & Norm (§4.3).

The learner's module is built, moved to float64 and run on ``x: (B, T, D) = (2, 5, 6)`` (one token constant, to
see whether eps is there). Its parameters are found by shape, whatever their names: LayerNorm's gain and bias are
the two ``(D,)`` parameters, set to random values and tried in both roles. A pitfall is the named wrong formula
that reproduces the learner's output; the line is the learner's step that computes the statistic or the sum.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from anatomy.course import exercises as ex
from anatomy.course import spec
from anatomy.course.compare import first_step, lowered_tol, max_diff, same, table_of
from anatomy.course.grader import Result, Subject, check_signature, run_guarded
from anatomy.course.module_probe import SIZES, Wrong, _build, _probe, _say_wrong
from anatomy.tracing.steps import Recording

# the output a known mistake gives, from the probe x, the sub-layer f and the norm
Formula = Callable[[torch.Tensor, nn.Module, nn.Module], torch.Tensor]

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


def _add_norm_wrong(placement: str) -> list[tuple[Wrong, Formula]]:
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


def _grade_add_norm(exercise: ex.Exercise, module: Subject, timeout: float | None) -> Result:
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

        def forward(m32: nn.Module = m32, what: tuple[str, str] = what) -> Any:
            return run_guarded(m32, (x.float(),), what, timeout, record=False, grad=True)[0]

        found = spec.audit_structure(m32, forward, path, SIZES["D"], "add_norm", sub32)
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
        batch = _batchnorm(norm, rec, path, name)
        if batch is not None:
            from anatomy.course.doctor_exercises import _finding

            result.table = table
            return _finding(result, batch)
        try:
            with torch.no_grad():
                reference = norm(x + sub(x)) if placement == "post" else x + sub(norm(x))
        except Exception:  # noqa: BLE001 - the learner's norm does not take (B, T, D) alone: the formula's own
            norm, own = nn.LayerNorm(SIZES["D"]).double(), False
            with torch.no_grad():
                reference = norm(x + sub(x)) if placement == "post" else x + sub(norm(x))
        tol = max(1e-9, lowered_tol(rec) or 0.0)
        if isinstance(out, torch.Tensor) and same(out, reference, tol=tol):
            broken = _norm_rules(m, norm, own, rec, path, name)
            if broken is not None:
                from anatomy.course.doctor_exercises import _finding

                result.table = table
                return _finding(result, broken)
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
        return _differs(result, exercise, name, placement, out, reference, rec, path)
    result.passed, result.table = True, ok[0][1]
    result.say(
        "PostNorm = norm(x + sublayer(x)) and PreNorm = x + sublayer(norm(x)), each with its own norm "
        "(float64, a Linear + tanh sub-layer)",
        "PostNorm = norm(x + sublayer(x))，PreNorm = x + sublayer(norm(x))，各有自己的 Norm（float64，子层为 Linear + tanh）",
    )
    return result


def _batchnorm(norm: nn.Module, rec: Recording | None, path: str, name: str) -> spec.BrokenRule | None:
    """A BatchNorm where the exercise asks for LayerNorm (its statistics are a batch's, per feature)."""
    from anatomy.course import block_words

    batch = first_step(rec, ("batch_norm",), None, path)
    if not isinstance(norm, nn.modules.batchnorm._BatchNorm) and (batch is None or batch.op != "batch_norm"):
        return None
    line, source = (batch.line, batch.source) if batch is not None else (None, "")
    f = block_words.finding("batchnorm_instead_of_layernorm", line, source)
    f.what = (f"{name}: {f.what[0]}", f"{name}：{f.what[1]}")
    return f


def _norm_rules(
    m: nn.Module, norm: nn.Module, own: bool, rec: Recording | None, path: str, name: str
) -> spec.BrokenRule | None:
    """Right on the probe: the norm is the module's own, with gamma and beta, started at ones and zeros."""
    from anatomy.course import block_words

    direct = [(n, p) for n, p in m.named_parameters(recurse=False) if tuple(p.shape) == (SIZES["D"],)]
    if not own and len(direct) < 2:  # F.layer_norm without weights, or a norm with elementwise_affine=False
        step = first_step(rec, ("layer_norm", "rms_norm", "sub", "__sub__", "mean"), None, path)
        f = block_words.finding("norm_without_parameters", step.line if step else None, step.source if step else "")
    elif not own:
        return None  # its own gamma and beta, and the output equals a fresh LayerNorm's: they start at 1 and 0
    else:
        vectors = [(n, p) for n, p in norm.named_parameters() if tuple(p.shape) == (SIZES["D"],)]
        if len(vectors) != 2:
            return None
        bias = _bias_index(norm, [p for _, p in vectors])
        gamma, beta = vectors[1 - bias][1], vectors[bias][1]
        if bool((gamma == 1).all()) and bool((beta == 0).all()):
            return None
        swapped = bool((gamma == 0).all()) and bool((beta == 1).all())
        attr = next((n for n, child in m.named_children() if child is norm), "")
        line, source = spec.definition_line(type(m), attr, path) if attr else (0, "")
        f = block_words.finding("norm_init_swapped" if swapped else "norm_init_wrong", line or None, source)
    f.what = (f"{name}: {f.what[0]}", f"{name}：{f.what[1]}")
    return f


def _differs(
    result: Result,
    exercise: ex.Exercise,
    name: str,
    placement: str,
    out: object,
    reference: torch.Tensor,
    rec: Recording | None,
    path: str,
) -> Result:
    """No known pitfall: by how much it differs, and the learner's last step that made the output."""
    from anatomy.course.spec import _same_file

    mine = [s for s in (rec.steps if rec is not None else []) if s.data and _same_file(s.file, path)]
    last = mine[-1] if mine else None
    result.pitfall = "unexplained"
    if last is not None:
        result.point(last.line, last.source)
    formula = "norm(x + sublayer(x))" if placement == "post" else "x + sublayer(norm(x))"
    en = f"{name} differs from {formula} by up to {max_diff(out, reference):.3g}, and no known pitfall reproduces it"
    zh = f"{name} 与参考公式 {formula} 最多相差 {max_diff(out, reference):.3g}，已知的坑都解释不了"
    result.brief(en, zh)
    result.brief(f"hint: {exercise.hint[0]}", f"提示：{exercise.hint[1]}")
    result.say(en + (f" (your output is made at line {last.line})" if last else ""), zh)
    result.say(f"hint: {exercise.hint[0]}", f"提示：{exercise.hint[1]}")
    return result


def _bias_index(norm: nn.Module, params: list[torch.Tensor]) -> int:
    """Which of a norm's two (D,) parameters is the bias: with the other at 0, the output is the bias itself."""
    probe = copy.deepcopy(norm)
    x = _probe(2)
    for i in (1, 0):
        ps = [p for n, p in probe.named_parameters() if tuple(p.shape) == (SIZES["D"],)]
        with torch.no_grad():
            ps[1 - i].zero_()
            ps[i].fill_(3.0)
            if bool(torch.allclose(probe(x), torch.full_like(x, 3.0))):
                return i
    return 1


def _learner_norm(m: nn.Module, sub: nn.Module) -> tuple[nn.Module, bool]:
    """``(norm, True)``: the learner's own norm (the first sub-module with parameters that is not the given
    sub-layer); else ``(nn.LayerNorm, False)``, for code that normalises with ``F.layer_norm`` directly."""
    inside = {id(s) for s in sub.modules()}
    for child in m.modules():
        if child is not m and id(child) not in inside and any(True for _ in child.parameters()):
            return child, True
    return nn.LayerNorm(SIZES["D"]).double(), False


def grade(exercise: ex.Exercise, subject: Subject, timeout: float | None) -> Result:
    if exercise.id == "layernorm":
        from anatomy.course.layernorm import grade_layernorm

        return grade_layernorm(exercise, subject, timeout)
    return _grade_add_norm(exercise, subject, timeout)
