"""Grading of the multi-head attention (§2.2) and block (§5.3) exercises: the exercise's rules, then the doctor.

The exercise's rules (``spec.py``: four projections used, norms of its own, Pre-Norm, GELU, dropout before the
residual add, True = may attend, a fill float16 can hold) are checked against the exercise's text, never against
the learner's choices. The doctor (``anatomy check``) probes the learner's module for the rest, maps its weights
from the observed dataflow and names the pitfall that reproduces its output with the learner's line; its warning
against the ``-inf`` fill, which this exercise's own hint prescribes, is left out.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from anatomy.course import block_rules as rules
from anatomy.course import exercises as ex
from anatomy.course import fill, spec, spec_block
from anatomy.course.grader import LearnError, Result, Subject, at_line, check_signature, run_guarded
from anatomy.doctor.diagnosis.references import PARALLEL
from anatomy.pitfalls import records
from anatomy.tracing.steps import Recording

if TYPE_CHECKING:
    from anatomy.doctor.report.findings import Finding, Report

D_MODEL, N_HEADS = 12, 3  # Dh = 4: every named size differs
PRESCRIBED = {"inf_fill_no_guard"}  # the exercise's hint asks for the -inf fill: no warning against it
MASK = (
    "Padding Mask用于把无效的padding位遮掉……Causal Mask用于自回归场景要求每个位置只能看到它自己以及之前的位置。",
    "the padding mask hides the padding ... the causal mask lets each position see only itself and the past.",
)
PRE_NORM = (
    "Pre-Norm先对输入做LayerNorm再进入Sublayer最后再做残差相加",
    "Pre-Norm applies LayerNorm to the input, then the sub-layer, and adds the residual last",
)


def _build(cls: Callable[..., Any], args: tuple[Any, ...], timeout: float | None) -> nn.Module:
    name = getattr(cls, "__name__", "the class")
    m, _ = run_guarded(
        lambda: cls(*args), (), (f"building {name}{args}", f"构造 {name}{args} 时"), timeout, record=False
    )
    if not isinstance(m, nn.Module):
        raise LearnError(
            f"{name}{args} made a {type(m).__name__}, not an nn.Module",
            f"{name}{args} 得到的是 {type(m).__name__}，不是 nn.Module",
        )
    return m.double().eval()


def _finding(result: Result, f: spec.BrokenRule) -> Result:
    result.passed = False
    result.point(f.line, f.source)
    result.more_lines = list(f.more_lines)
    result.tell(f.pitfall, f.what, f.post, f.hint, where=at_line(f.line, f.source))
    return result


def grade(exercise: ex.Exercise, subject: Subject, timeout: float | None) -> Result:
    name = exercise.entries[0]
    cls = getattr(subject, name)
    mha = exercise.id == "mha"
    if mha:
        check_signature(cls.__init__, f"{name}.__init__", ["d_model", "n_heads"], 2)
    else:
        check_signature(cls.__init__, f"{name}.__init__", ["d_model", "n_heads", "d_ff"], 3)
    args = (D_MODEL, N_HEADS) if mha else (D_MODEL, N_HEADS, 4 * D_MODEL)
    result = Result(exercise.id, subject.file, passed=False)
    torch.manual_seed(0)
    m = _build(cls, args, timeout)
    x = torch.randn(2, 5, D_MODEL, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    causal = torch.ones(5, 5, dtype=torch.bool).tril()[None, None]  # (1, 1, T, S)
    what = (f"{name}.forward(x (2, 5, {D_MODEL}), mask)", f"{name}.forward(x (2, 5, {D_MODEL}), mask)")

    def call(inp: torch.Tensor, mask: torch.Tensor | None = causal, module: nn.Module = m, grad: bool = False) -> Any:
        return run_guarded(lambda: module(inp, mask), (), what, timeout, record=False, grad=grad)[0]

    torch.manual_seed(0)
    m32 = _build(cls, args, timeout).float()  # globals stay float32: the audit runs where they fit
    calls: list[spec.ModuleCall] = []
    found = spec.audit_structure(
        m32, lambda: call(x.float(), causal, m32, True), subject.file, D_MODEL, exercise.id, seen=calls
    )
    if found is not None:
        return _finding(result, found)
    rec = rules.record(m, x)
    found = rules.eval_random(lambda: call(x), subject.file, rec)
    if found is not None:
        return _finding(result, found)

    report, build = _doctor(cls, name, mha, timeout)
    result.extra["doctor"] = {"status": report.diagnosis.get("status"), "faults": sorted(report.faults)}
    result.table = _shape_table(build, timeout)
    ignored = set(PRESCRIBED)
    if spec.norms_own_and_apart(calls, m32):
        ignored.add("shared_layernorm")  # every norm ran apart and the module owns them: seen, not inferred
    errors = [f for f in report.errors if f.fault not in ignored and f.explained_by not in ignored]
    for f in report.warnings:  # the named ones, in the bug list's plain words (the rest is in the full report)
        z = records.get(f.fault)
        if z is not None and z.zoo and z.name not in PRESCRIBED and z.name != "finite_mask_fill":
            result.warn(z.summary_en, z.summary_zh)
    doctor_fault = (
        (report.diagnosis.get("fault") or next((f.fault for f in errors if f.fault), None)) if errors else None
    )
    trusted = doctor_fault is None or rules.confirmed(doctor_fault, report, rec, subject.file)
    if errors and doctor_fault not in (None, "unexplained") and trusted:
        named = rules.named(rec, subject.file, mha, only=rules.SPECIFIC)  # the step itself, more than a fault
        if named is not None and named.pitfall != doctor_fault:
            return _finding(result, named)
        return _lined(_doctor_fault(result, report, errors, doctor_fault, exercise, cls.forward), report, rec, mha)
    rule = _behaviour(m, call, subject, x, mha, timeout) or _spec(report, m, x, subject.file, rec)
    if rule is not None:
        return _finding(result, rule)
    diag = report.diagnosis
    variant = diag.get("variant", {})
    if not errors and diag.get("status") == "matches" and variant.get("placement") == PARALLEL:
        return _finding(result, rules.parallel(rec, subject.file))
    if errors or diag.get("status") != "matches" or variant.get("positional"):
        named = rules.named(rec, subject.file, mha)
        if named is not None:
            return _finding(result, named)
        if errors and trusted:
            return _lined(_doctor_fault(result, report, errors, doctor_fault, exercise, cls.forward), report, rec, mha)
        return _finding(result, rules.differs(report, rec, subject.file, mha))
    return _pass(result, subject, mha)


def _doctor(
    cls: Callable[..., Any], name: str, mha: bool, timeout: float | None
) -> tuple[Report, Callable[[int, int], Any]]:
    """The doctor's report on the learner's class (built at the doctor's sizes), and the builder it used."""
    from anatomy.doctor import check as doctor_check
    from anatomy.doctor.loading.subject import CheckError

    def build(d_model: int, n_heads: int) -> Any:  # the learner's module
        return cls(d_model, n_heads) if mha else cls(d_model, n_heads, 4 * d_model)

    build.__name__ = f"{name}(d_model, n_heads)" if mha else f"{name}(d_model, n_heads, 4 * d_model)"
    try:
        report = doctor_check(
            build, kind="attention" if mha else "block", d_model=D_MODEL, n_heads=N_HEADS, timeout=timeout
        )
    except CheckError as err:
        zh = getattr(err, "zh", None) or f"检查无法进行：{err}"
        raise LearnError(str(err), zh) from None
    return report, build


def _pass(result: Result, subject: Subject, mha: bool) -> Result:
    result.passed = True
    fill.warn_finite(result, subject)
    result.brief(
        "right: it follows the exercise's rules and matches the reference on every probe",
        "正确：符合练习的各项要求，并在所有探针上与参考实现一致",
    )
    result.say(
        "the exercise's rules hold (four projections used, "
        + ("" if mha else "Pre-Norm, own norms, GELU, ")
        + "True = may attend), and the output equals the reference's on the same weights",
        "练习的要求都满足（四个投影都用上了、"
        + ("" if mha else "Pre-Norm、各自的 Norm、GELU、")
        + "True 表示可以关注），在同样的权重下输出与参考实现一致",
    )
    return result


def _lined(result: Result, report: Report, rec: Recording | None, mha: bool) -> Result:
    """A doctor's finding that points at no line gets the learner's line where the difference first shows."""
    if result.pitfall == "norm_on_query_only":  # the projection that reads the raw x, not the norm's line
        raw = rules.reads_raw_input(rec, result.file)
        if raw is not None:
            result.point(raw.line, raw.source)
    if result.line is None:
        where = rules.differs(report, rec, result.file, mha)
        result.point(where.line, where.source)
    return result


def _spec(report: Report, m: nn.Module, x: torch.Tensor, file: str, rec: Recording | None) -> spec.BrokenRule | None:
    """The exercise's design against what the doctor found, the norms' initial values, training mode."""
    return (
        rules.variant(report.found, D_MODEL, m, file, rec)
        or rules.initial_values(report.found, m, file)
        or rules.training(m, x, file)
    )


def _behaviour(
    m: nn.Module, call: Callable[..., Any], subject: Subject, x: torch.Tensor, mha: bool, timeout: float | None
) -> spec.BrokenRule | None:
    """The rules tested by behaviour: the mask's sense, Pre-Norm, GELU, dropout's place, the fill in float16."""
    seen = spec_block.leak(m, lambda inp, mask: call(inp, mask), 5, D_MODEL)
    if seen is not None:
        flipped = spec_block.leak(m, lambda inp, mask: call(inp, ~mask), 5, D_MODEL)
        line, source = _mask_line(m, x, subject.file)
        out = call(x, ~torch.ones(5, 5, dtype=torch.bool).tril()[None, None])
        out = out[0] if isinstance(out, (tuple, list)) else out
        inverted = flipped is None and isinstance(out, torch.Tensor) and bool(torch.isfinite(out).all())
        ignored = not inverted and _mask_has_no_effect(call, x)
        if ignored:
            line, source = _unmasked_call(m, type(m).forward, subject.file) if line is None else (line, source)
        elif not inverted:
            return None  # positions mixed some other way: the doctor's verdict stands
        return spec.BrokenRule(
            "mask_inverted" if inverted else "mask_ignored",
            line,
            source,
            (
                (
                    f"under a causal mask (True = may attend) position {seen[0]} sees position {seen[1]}: your code hides "
                    "what True marks, the opposite of this exercise's convention"
                )
                if inverted
                else f"under a causal mask position {seen[0]} still sees position {seen[1]}: the mask does not reach the scores",
                (
                    f"在因果掩码（True 表示可以关注）下，位置 {seen[0]} 看到了位置 {seen[1]}：你的代码遮住了 True 标记的位置，"
                    "与本练习的约定相反"
                )
                if inverted
                else f"在因果掩码下，位置 {seen[0]} 仍然看到位置 {seen[1]}：掩码没有作用到分数上",
            ),
            MASK,
            (
                "True = may attend: scores.masked_fill(~mask, float('-inf'))",
                "True 表示可以关注：scores.masked_fill(~mask, float('-inf'))",
            ),
        )
    big = fill.big_fill(subject)
    if big is not None:
        half = spec_block.half_copy(m)
        outcome = fill.float16_outcome(lambda: half(x.half(), torch.ones(5, 5, dtype=torch.bool).tril()[None, None]))
        line, source, value = big
        return spec.BrokenRule(
            "fill_minus_1e9",
            line,
            source,
            (
                f"the mask fill {fill.shown(value)} is not a float16 number (float16 stops at -65504); {outcome[0]}",
                f"掩码填充值 {fill.shown(value)} 不是 float16 能表示的数（float16 最小到 -65504）；{outcome[1]}",
            ),
            fill.POST,
            (
                "fill with float('-inf') (the post's advice) or torch.finfo(scores.dtype).min",
                "用 float('-inf')（原文的建议）或 torch.finfo(scores.dtype).min 填充",
            ),
        )
    if mha:
        return None
    return (
        spec_block.placement(m, call, subject.file, D_MODEL, PRE_NORM)
        or spec_block.activation(m, x, subject.file)
        or spec_block.dropout_place(m, subject.file, D_MODEL)
    )


def _mask_has_no_effect(call: Callable[..., Any], x: torch.Tensor) -> bool:
    with_mask, without = call(x), call(x, None)
    with_mask, without = (t[0] if isinstance(t, (tuple, list)) else t for t in (with_mask, without))
    return isinstance(with_mask, torch.Tensor) and isinstance(without, torch.Tensor) and torch.equal(with_mask, without)


def _unmasked_call(m: nn.Module, forward: Callable[..., Any], file: str) -> tuple[int | None, str]:
    """The forward's line that calls a sub-module taking a mask without passing it one."""
    import inspect
    import re

    takers = [n for n, c in m.named_children() if any("mask" in p for p in inspect.signature(c.forward).parameters)]
    try:
        lines, start = inspect.getsourcelines(forward)
    except (OSError, TypeError):
        return None, ""
    for number, text in enumerate(lines[1:], start=start + 1):
        code = text.split("#")[0]
        if "mask" not in code and any(re.search(rf"self\.{re.escape(n)}\(", code) for n in takers):
            return number, text.strip()
    return None, ""


def _mask_line(m: nn.Module, x: torch.Tensor, file: str) -> tuple[int | None, str]:
    from anatomy.tracing import recorder as rec_mod
    from anatomy.tracing.steps import RecordError

    try:
        rec = rec_mod.record(
            m,
            x,
            torch.ones(5, 5, dtype=torch.bool).tril()[None, None],
            module=m,
            sizes={"B": 2, "T": 5, "H": N_HEADS, "Dh": D_MODEL // N_HEADS, "D": D_MODEL},
        )
    except RecordError:
        return None, ""
    for s in rec.steps:
        if s.op in (
            "masked_fill",
            "masked_fill_",
            "where",
            "scaled_dot_product_attention",
            "multi_head_attention_forward",
        ) and spec._same_file(s.file, file):
            return s.line, s.source
    return None, ""


def _unadded(forward: Callable[..., Any] | None, line: int | None, source: str) -> tuple[int | None, str]:
    import inspect
    import re

    if forward is None:  # no forward to read: the doctor's line stands
        return line, source
    try:
        lines, start = inspect.getsourcelines(forward)
    except (OSError, TypeError):
        return line, source
    for number, text in enumerate(lines[1:], start=start + 1):
        code = text.split("#")[0]
        a_norm = re.search(r"self\.\w*(ln|norm|Norm|归一)\w*\(", code) and code.count("self.") == 1
        if (
            re.search(r"^\s*\w+\s*=\s*.*self\.\w+\(", code)
            and "+" not in code
            and "norm" not in code.split("=")[0]
            and not a_norm
        ):
            return number, text.strip()
    return line, source


def _doctor_fault(
    result: Result,
    report: Report,
    errors: list[Finding],
    fault: str | None,
    exercise: ex.Exercise,
    forward_of: Callable[..., Any] | None = None,
) -> Result:
    from anatomy.pitfalls import FAULTS

    pick = (
        next((f for f in report.findings if f.probe == "diagnosis" and f.where), None)
        or next((f for f in errors if fault and f.fault == fault and f.where), None)
        or next((f for f in errors if f.fault and f.where), None)
        or next((f for f in errors if f.fault), None)
        or errors[0]
    )
    name = fault or pick.fault or pick.probe
    where = pick.where[0] if isinstance(pick.where, list) and pick.where else pick.where
    line, source = (where.get("line"), where.get("source") or "") if isinstance(where, dict) else (None, "")
    if name == "split_without_transpose" and source and _transposes_first(source):
        name = "transpose_before_reshape"  # the order the post warns about, not a missing transpose
    if name == "no_residual":  # the forward's line that keeps a sub-layer's output without adding x back
        line, source = _unadded(forward_of, line, source)
    result.pitfall = name
    result.point(line, source)
    known = FAULTS.get(fault or "")
    told = records.get(name) if name == "transpose_before_reshape" else known  # the record that explains it
    what = (told.summary_en, told.summary_zh) if told is not None else (pick.en, pick.zh)
    post = known.post_zh if known is not None and known.post_zh else exercise.post[0]
    hint = records.hint(name) or exercise.hint
    result.brief(*what)
    result.brief(f"the post: 「{post}」", f"原文：「{post}」")
    result.brief(f"hint: {hint[0]}", f"提示：{hint[1]}")
    for lang in ("en", "zh"):
        result.messages[lang] += [line for line in report.render(lang).splitlines() if line.strip()]
    return result


def _transposes_first(source: str) -> bool:
    import re

    return bool(re.search(r"(transpose|permute|\.mT|\.T\b).*\.(reshape|view)\(", source.split("#")[0]))


def _shape_table(factory: Callable[[int, int], Any], timeout: float | None) -> list[dict[str, Any]]:
    """The learner's rows of ``anatomy trace FILE.py:CLASS`` (empty when the trace cannot follow the module)."""
    try:
        from anatomy.doctor.trace.learner_trace import trace_learner

        trace = trace_learner(factory, d_model=D_MODEL, n_heads=N_HEADS, timeout=timeout)
    except Exception:  # noqa: BLE001 - the table is an extra; the verdict stands without it
        return []
    rows = []
    for row in trace.to_dict().get("rows", []):
        rows.append(
            {
                "line": row.get("line") or 0,
                "code": row.get("source") or row.get("code") or "",
                "op": row.get("op") or row.get("step") or "",
                "shape": row.get("shape") or [],
                "dims": row.get("dims") or "",
            }
        )
    return rows
