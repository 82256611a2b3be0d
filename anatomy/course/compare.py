"""Comparing the learner's outputs with the reference: tolerances by precision, shapes in the legend's letters,
and the learner's steps and lines (from the recorder) that made a value."""

from __future__ import annotations

import inspect
import os
from collections.abc import Sequence
from typing import Any

import torch

from anatomy.tracing import dims as rd
from anatomy.tracing.steps import Recording, Step


def as_tensors(out: object) -> list[Any]:
    """The learner's output as a list of values (a tuple or list unpacked; anything else alone)."""
    if isinstance(out, (tuple, list)):
        return [o for o in out]
    return [out]


def tolerance(t: torch.Tensor) -> float:
    """The relative tolerance for a result computed in ``t``'s precision (float64 probes; float32 code is right)."""
    return {torch.float64: 1e-7, torch.float32: 2e-5}.get(t.dtype, 2e-2)


def lowered_tol(rec: Recording | None) -> float | None:
    """The tolerance of the lowest precision the learner's code computed in, when it cast below float64 on purpose
    (``softmax(x.float())``, a LayerNorm in float32): None when everything stayed float64."""
    if rec is None:
        return None
    worst = None
    for s in rec.steps:
        dtype = s.value.dtype if isinstance(s.value, torch.Tensor) else None
        if s.op in ("half", "bfloat16") or dtype in (torch.float16, torch.bfloat16):
            return 2e-2
        if s.op == "float" or dtype == torch.float32:
            worst = 2e-5
    return worst


def same(a: object, b: object, tol: float | None = None) -> bool:
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
        return False
    tol = max(tolerance(a), tolerance(b)) if tol is None else tol
    if tuple(a.shape) != tuple(b.shape):
        return False
    if a.dtype == torch.bool or b.dtype == torch.bool:
        return a.dtype == b.dtype and bool((a == b).all())
    a, b = a.detach().double(), b.detach().double()
    both_nan = a.isnan() & b.isnan()
    diff = (a - b).abs().masked_fill(both_nan, 0.0)
    return bool((diff.nan_to_num(nan=float("inf")) <= tol * (1 + b.abs().nan_to_num())).all())


def max_diff(a: Any, b: Any) -> float:  # Any: the learner's values, anything
    try:
        return float((a.detach().double() - b.detach().double()).abs().nan_to_num(nan=float("inf")).max())
    except (RuntimeError, AttributeError, TypeError):
        return float("inf")


def dim_names(shape: Sequence[int], sizes: dict[str, int]) -> tuple[str, ...]:
    return rd.by_size(tuple(shape), rd.SizeNames(sizes))


def dims_of(shape: Sequence[int], sizes: dict[str, int]) -> str:
    return rd.letters(dim_names(shape, sizes))


def first_step(
    rec: Recording | None, ops: tuple[str, ...] | None, out_dims: tuple[str, ...] | None, file: str
) -> Step | None:
    """The learner's first recorded step with one of ``ops`` (None: any op) and output dims ``out_dims`` (None: any),
    in their file; failing the dims, the first with one of ``ops``."""
    if rec is None:
        return None
    mine = [s for s in rec.steps if os.path.abspath(s.file) == os.path.abspath(file) and (ops is None or s.op in ops)]
    for s in mine:
        if out_dims is None or (s.outputs and tuple(s.outputs[0].dims) == tuple(out_dims)):
            return s
    return mine[0] if mine else None


def source_line(module: object, entry: str, pattern: str) -> tuple[int | None, str]:
    """The first line of ``entry``'s own source (after its ``def``) matching ``pattern``: for code the recorder
    cannot see (Python arithmetic, tensors made from numbers alone)."""
    import re

    try:
        lines, start = inspect.getsourcelines(getattr(module, entry))
    except (OSError, TypeError, AttributeError):
        return None, ""
    for i, line in enumerate(lines[1:], start=start + 1):
        code = line.split("#")[0]
        if pattern and re.search(pattern, code):
            return i, line.strip()
    return None, ""


def table_of(rec: Recording | None, file: str) -> list[dict[str, Any]]:
    if rec is None:
        return []
    return [
        {
            "line": s.line,
            "code": s.source.split("  #")[0].rstrip(),
            "op": s.op,
            "shape": [list(o.shape) for o in s.outputs][:1][0] if s.outputs else [],
            "dims": rd.letters(s.outputs[0].dims) if s.outputs else "",
        }
        for s in rec.steps
        if os.path.abspath(s.file) == os.path.abspath(file) and s.data
    ]


def render_table(rows: list[dict[str, Any]]) -> list[str]:
    if not rows:
        return []
    width = min(max(len(r["code"]) for r in rows), 60)
    out = [f"{'line':>4}  {'code':<{width}}  {'op':<12}  shape"]
    for r in rows:
        code = r["code"] if len(r["code"]) <= width else r["code"][: width - 1] + "…"
        out.append(f"{r['line']:>4}  {code:<{width}}  {r['op']:<12}  {tuple(r['shape'])} {r['dims']}")
    return out
