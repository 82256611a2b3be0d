"""Grading of the multi-head attention (§2.2) and block (§5.3) exercises by the doctor.

The doctor (``anatomy check``) probes the learner's module, maps its weights from the observed dataflow and names
the pitfall that reproduces its output, with the learner's lines (``findings[].where``); the course adds the
learner's shape table (``anatomy trace FILE.py:CLASS``) and keeps the verdict to pass or not yet.
"""

from __future__ import annotations

from anatomy.course import exercises as ex
from anatomy.course.grader import LearnError, Result, check_signature, load

D_MODEL, N_HEADS = 12, 3  # Dh = 4: every named size differs


def grade(exercise: ex.Exercise, path: str, timeout) -> Result:
    from anatomy.doctor import check as doctor_check
    from anatomy.doctor.subject import CheckError

    module = load(exercise, path, timeout)
    name = exercise.entries[0]
    if exercise.id == "mha":
        check_signature(getattr(module, name).__init__, f"{name}.__init__", ["d_model", "n_heads"], 2)
    else:
        check_signature(getattr(module, name).__init__, f"{name}.__init__", ["d_model", "n_heads", "d_ff"], 3)
    factory = None
    target = f"{path}:{name}"
    if exercise.id == "block":  # the doctor builds (d_model, n_heads); the block also takes d_ff = 4 D
        factory = _block_factory(module, name)
    try:
        report = doctor_check(factory or target, kind="attention" if exercise.id == "mha" else "block",
                              d_model=D_MODEL, n_heads=N_HEADS, timeout=timeout)
    except CheckError as err:
        zh = getattr(err, "zh", None) or f"检查无法进行：{err}"
        raise LearnError(str(err), zh) from None
    result = Result(exercise.id, path, passed=report.exit_code() == 0)
    result.extra["doctor"] = {"status": report.diagnosis.get("status"), "faults": sorted(report.faults)}
    result.table = _shape_table(target, factory, timeout)
    if result.passed:
        variant = report.diagnosis.get("variant") or ""
        result.say("the doctor finds no pitfall: it " + ("matches the reference" + (f" ({variant})" if variant else "")),
                   "医生没有发现坑：与参考实现一致" + (f"（{variant}）" if variant else ""))
        return result
    fault = report.diagnosis.get("fault")
    errors = report.errors or report.findings
    named = [f for f in errors if f.fault]
    pick = (next((f for f in report.findings if f.probe == "diagnosis" and f.where), None)
            or next((f for f in report.findings if fault and f.fault == fault and f.where), None)
            or next((f for f in named if f.where), None) or (named or errors)[0])
    result.pitfall = fault or pick.fault or pick.probe
    where = pick.where[0] if isinstance(pick.where, list) and pick.where else pick.where
    if isinstance(where, dict):
        result.line = where.get("line")
    for lang in ("en", "zh"):
        result.lines[lang] += [line for line in report.render(lang).splitlines() if line.strip()]
    return result


def _block_factory(module, name: str):
    cls = getattr(module, name)

    def build(d_model: int, n_heads: int):
        return cls(d_model, n_heads, 4 * d_model)

    build.__name__ = f"{name}(d_model, n_heads, 4 * d_model)"
    return build


def _shape_table(target: str, factory, timeout) -> list[dict]:
    """The learner's rows of ``anatomy trace FILE.py:CLASS`` (empty when the trace cannot follow the module)."""
    try:
        from anatomy.doctor.learner_trace import trace_learner

        trace = trace_learner(factory or target, d_model=D_MODEL, n_heads=N_HEADS, timeout=timeout)
    except Exception:  # noqa: BLE001 - the table is an extra; the doctor's verdict stands without it
        return []
    rows = []
    for row in trace.to_dict().get("rows", []):
        rows.append({"line": row.get("line") or 0, "code": row.get("source") or row.get("code") or "",
                     "op": row.get("op") or row.get("step") or "", "shape": row.get("shape") or [],
                     "dims": row.get("dims") or ""})
    return rows
