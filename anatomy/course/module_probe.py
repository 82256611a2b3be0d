"""What the module exercises (LayerNorm, Add & Norm) share: the probe, building the learner's module, a named
wrong formula (:class:`Wrong`) and how a finding of one is said."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from anatomy.course.compare import first_step
from anatomy.course.grader import LearnError, Result, run_guarded
from anatomy.tracing.steps import Recording

SIZES = {"B": 2, "T": 5, "D": 6}
EPS = 1e-5


@dataclass(frozen=True)
class Wrong:
    name: str
    what: tuple[str, str]
    post: tuple[str, str]
    hint: tuple[str, str]
    ops: tuple[str, ...]
    out_dims: tuple[str, ...] | None = None  # point at the step with these output dims (() : a scalar)


def _probe(seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(SIZES["B"], SIZES["T"], SIZES["D"], generator=g, dtype=torch.float64) * 3 + 1
    x[1, 2] = 0.5  # one constant token (exactly: 0.5 sums without rounding): variance 0, only eps keeps it finite
    return x


def _build(cls: Callable[..., Any], args: tuple[Any, ...], name: str, timeout: float | None) -> nn.Module:
    what = (f"building {name}{args}", f"构造 {name}{args} 时")
    module, _ = run_guarded(lambda: cls(*args), (), what, timeout, record=False)
    if not isinstance(module, nn.Module):
        raise LearnError(
            f"{name}{args} made a {type(module).__name__}, not an nn.Module",
            f"{name}{args} 得到的是 {type(module).__name__}，不是 nn.Module",
        )
    return module.double().eval()


def _source_at(path: str, line: int) -> str:
    import linecache

    return linecache.getline(path, line).strip()


def _say_wrong(result: Result, wrong: Wrong, rec: Recording | None, path: str, diff: float, who: str = "") -> Result:
    step = first_step(rec, wrong.ops, wrong.out_dims, path)
    result.point(step.line if step else None, step.source if step else "")
    shown = "inf/NaN" if math.isinf(diff) else f"{diff:.3g}"
    numbers = (
        f"numbers: your output differs from the reference by up to {shown} and equals the `{wrong.name}` "
        "version exactly",
        f"数字：你的输出与参考实现最多相差 {shown}，而与 `{wrong.name}` 版本完全一致",
    )
    where = (f"line {step.line} `{step.source}`: ", f"第 {step.line} 行 `{step.source}`：") if step else ("", "")
    result.tell(wrong.name, wrong.what, wrong.post, wrong.hint, where=where, numbers=numbers, who=who)
    return result
