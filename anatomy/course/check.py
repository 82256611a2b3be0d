"""Grade one exercise: :func:`check` dispatches to the function, module, doctor or training grader."""

from __future__ import annotations

import torch

from anatomy.course import exercises as ex
from anatomy.course import functions as fx
from anatomy.course.grader import (
    LearnError,
    Result,
    as_tensors,
    check_signature,
    dim_names,
    dims_of,
    first_step,
    load,
    max_diff,
    run_guarded,
    same,
    source_line,
    table_of,
)

SIGNATURES = {  # entry -> (arguments the grader passes, how many are required)
    "attention": (["q", "k", "v", "mask"], 3), "split_heads": (["x", "n_heads"], 2), "merge_heads": (["x"], 1),
    "padding_mask": (["lengths", "max_len"], 2), "causal_mask": (["t"], 1),
    "sinusoidal_encoding": (["max_len", "d_model"], 2),
}


def check(exercise_id: str, path, *, timeout: float | None = 20.0, **options) -> Result:
    """Grade ``path`` as exercise ``exercise_id``; :class:`LearnError` when it cannot be graded."""
    exercise = ex.get(exercise_id)
    if exercise.id in fx.FUNCTION_EXERCISES:
        return _functions(exercise, str(path), timeout)
    if exercise.id in ("layernorm", "add_norm"):
        from anatomy.course import modules

        return modules.grade(exercise, str(path), timeout)
    if exercise.id in ("mha", "block"):
        from anatomy.course import doctor_exercises

        return doctor_exercises.grade(exercise, str(path), timeout)
    from anatomy.course import tiny_lm

    return tiny_lm.grade(exercise, str(path), timeout, **options)


def _call_text(call: fx.Call) -> str:
    parts = [f"({', '.join(map(str, a.shape))})" if isinstance(a, torch.Tensor) else repr(a) for a in call.args]
    return f"{call.entry}({', '.join(parts)})"


def _functions(exercise: ex.Exercise, path: str, timeout: float | None) -> Result:
    module = load(exercise, path, timeout)
    spec = fx.FUNCTION_EXERCISES[exercise.id]
    for name in exercise.entries:
        check_signature(getattr(module, name), name, *SIGNATURES[name])
    result = Result(exercise.id, path, passed=False)
    calls = spec.calls()
    runs = []  # (call, learner outputs, reference outputs, recording)
    for call in calls:
        what = (f"{call.entry} (called as {_call_text(call)})", f"{call.entry}（调用 {_call_text(call)}）")
        out, rec = run_guarded(getattr(module, call.entry), call.args, what, timeout, dims=call.dims,
                               sizes=fx.SIZES)
        ref = spec.reference[call.entry](*call.args)
        runs.append((call, as_tensors(out), as_tensors(ref), rec))
    result.table = table_of(runs[0][3], path)
    for call, got, want, rec in runs:  # the contract first: how many values, which shapes and dtypes
        if len(got) != len(want) or not all(isinstance(g, torch.Tensor) for g in got):
            kinds = ", ".join(type(g).__name__ for g in got)
            line, source = source_line(module, call.entry, r"\breturn\b")
            result.pitfall, result.line = "wrong_return", line
            at_en, at_zh = (f" at line {line} `{source}`", f"（第 {line} 行 `{source}`）") if line else ("", "")
            result.say(f"{_call_text(call)} returned {len(got)} value(s) ({kinds}){at_en}; the exercise wants "
                       f"{len(want)} tensor(s)" + (" (out, weights)" if call.entry == "attention" else ""),
                       f"{_call_text(call)} 返回了 {len(got)} 个值（{kinds}）{at_zh}；练习要的是 {len(want)} 个张量"
                       + ("（out, weights）" if call.entry == "attention" else ""))
            return result
        for g, w in zip(got, want):
            if tuple(g.shape) != tuple(w.shape):
                step = first_step(rec, None, dim_names(g.shape, fx.SIZES), path)
                result.pitfall, result.line = "wrong_shape", step.line if step else source_line(
                    module, call.entry, r"\breturn\b")[0]
                result.say(f"{_call_text(call)} returned shape {tuple(g.shape)} {dims_of(g.shape, fx.SIZES)}; the "
                           f"post's flow expects {tuple(w.shape)} {dims_of(w.shape, fx.SIZES)}"
                           + (f" (first made at line {step.line}: `{step.source}`)" if step else ""),
                           f"{_call_text(call)} 返回的形状是 {tuple(g.shape)} {dims_of(g.shape, fx.SIZES)}；原文的流程要求 "
                           f"{tuple(w.shape)} {dims_of(w.shape, fx.SIZES)}"
                           + (f"（在第 {step.line} 行产生：`{step.source}`）" if step else ""))
                result.say(f"hint: {exercise.hint[0]}", f"提示：{exercise.hint[1]}")
                return result
            if (w.dtype == torch.bool) != (g.dtype == torch.bool):
                line, source = source_line(module, call.entry, r"\breturn\b")
                result.pitfall, result.line = "wrong_dtype", line
                result.say(f"{_call_text(call)} returned {g.dtype}"
                           + (f" at line {line} `{source}`" if line else "")
                           + "; a boolean mask is expected (True = may attend): "
                           "an additive 0 / -inf mask is another valid form, but not this exercise's",
                           f"{_call_text(call)} 返回了 {g.dtype}；这里要的是布尔掩码（True 表示可以关注）：0/-inf 的加性掩码"
                           "也是一种写法，但不是本练习要的")
                return result
    if all(same(g, w) for _, got, want, _ in runs for g, w in zip(got, want)):
        result.passed = True
        result.say("matches the reference on every probe (float64, sizes B=2, H=3, T=5, S=7, Dh=4, D=12)",
                   "在所有探针输入上与参考实现一致（float64，尺寸 B=2, H=3, T=5, S=7, Dh=4, D=12）")
        return result
    for p in spec.pitfalls:
        judged = [r for r in runs if not (p.unmasked and len(r[0].args) > 3)]
        variant = [as_tensors((p.variant(c.entry) or spec.reference[c.entry])(*c.args)) for c, *_ in judged]
        if any(not same(v, w) for (_, _, want, _), vs in zip(judged, variant) for v, w in zip(vs, want)) and all(
                same(g, v) for (_, got, _, _), vs in zip(judged, variant) for g, v in zip(got, vs)):
            return _named(result, exercise, p, judged, path, module)
    call, got, want, rec = next(r for r in runs if not all(same(g, w) for g, w in zip(r[1], r[2])))
    diff = max(max_diff(g, w) for g, w in zip(got, want))
    result.pitfall = "unexplained"
    result.say(f"{_call_text(call)} differs from the reference by up to {diff:.3g}, and none of the known pitfalls "
               f"({', '.join(p.name for p in spec.pitfalls)}) reproduces it: compare your shape table with the post's",
               f"{_call_text(call)} 与参考实现最多相差 {diff:.3g}，已知的坑（{', '.join(p.name for p in spec.pitfalls)}）"
               "都解释不了：请把你的形状表和原文对照")
    result.say(f"hint: {exercise.hint[0]}", f"提示：{exercise.hint[1]}")
    return result


def _named(result: Result, exercise: ex.Exercise, p: fx.Pitfall, runs, path: str, module) -> Result:
    affected = [r for r in runs if p.variant(r[0].entry) is not None]  # the calls of the entry with the mistake
    call, got, want, rec = next((r for r in affected if not all(same(g, w) for g, w in zip(r[1], r[2]))), affected[0])
    step = None
    for r in affected:
        step = step or first_step(r[3], p.ops, p.out_dims, path)
    line, source = (step.line, step.source) if step else source_line(module, call.entry, p.text)
    result.pitfall, result.line = p.name, line
    where_en = f"line {line} `{source}`: " if line else ""
    where_zh = f"第 {line} 行 `{source}`：" if line else ""
    result.say(f"pitfall `{p.name}` — {where_en}{p.what[0]}", f"坑 `{p.name}` —— {where_zh}{p.what[1]}")
    result.say(f"the post: 「{p.post[0]}」 ({p.post[1]})", f"原文：「{p.post[0]}」")
    diff = max(max_diff(g, w) for g, w in zip(got, want))
    more_en, more_zh = _evidence(exercise.id, got, want)
    result.say(f"numbers: on {_call_text(call)} your output differs from the reference by up to {diff:.3g} and "
               f"equals the `{p.name}` version exactly{more_en}",
               f"数字：在 {_call_text(call)} 上，你的输出与参考实现最多相差 {diff:.3g}，而与 `{p.name}` 版本完全一致{more_zh}")
    result.say(f"hint: {p.hint[0]}", f"提示：{p.hint[1]}")
    return result


def _evidence(exercise_id: str, got: list, want: list) -> tuple[str, str]:
    """One more number in the post's terms, where one says more than the difference."""
    if exercise_id == "attention" and len(got) == 2:
        sums = got[1].sum(-1)  # (B, H, T): over the keys
        if not torch.allclose(sums, torch.ones_like(sums), atol=1e-6):
            return (f"; your weights' rows sum to {float(sums.min()):.3f} .. {float(sums.max()):.3f} over the keys, "
                    "not 1", f"；你的权重每行对键求和在 {float(sums.min()):.3f} .. {float(sums.max()):.3f} 之间，而不是 1")
        peak, ref_peak = float(got[1].amax(-1).mean()), float(want[1].amax(-1).mean())
        return (f"; the average largest weight per row is {peak:.3f} (with sqrt(Dh): {ref_peak:.3f})",
                f"；每行最大权重的平均值为 {peak:.3f}（除以 sqrt(Dh) 时为 {ref_peak:.3f}）")
    if exercise_id == "masks" and got and got[0].dim() == 2 and got[0].shape[0] == got[0].shape[1]:
        rows = " ".join("".join("1" if v else "0" for v in row) for row in got[0].tolist())
        return f"; your mask, row by row: {rows}", f"；你的掩码逐行为：{rows}"
    return "", ""


__all__ = ["LearnError", "Result", "check"]
