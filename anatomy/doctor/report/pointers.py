"""The learner's lines behind a diagnosis, from a recording (``anatomy.tracing``): what ``findings[].where`` holds.

    where = pointers(rec, "split_without_transpose")
    # [{"line": 21, "source": "q = self.W_q(x).view(b, t, self.h, self.d_k)", "en": "line 21 `q = ...` is used by
    #   the matmul at line 24 without transpose(1, 2): the scores are (B, T, H, H)", "zh": ...}, {"line": 24, ...}]
    point(report.findings, rec)      # fills ``Finding.where`` for every finding the recording can place

Each pitfall's record names the rule that finds its steps (``pointer``: one of :data:`RULES`), and each probe the
pitfall it points at when no fault is named (``points_for``): the scale is the line that multiplies or
divides the scores (or, when nothing does, the matmul that makes them); a split without transpose is the view and
the matmul that uses it; a wrong merge is the view that joins heads; a mask fault is the line that fills the
scores (before the softmax, or after it); the norm and residual faults are the norm calls and the residual adds.
Nothing is guessed from names: a fault the recording shows no step for gets no pointer.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from anatomy.doctor.recording import observed as ob
from anatomy.doctor.recording.cores import PASS_OPS, attention_cores, key_axis
from anatomy.pitfalls import records
from anatomy.tracing import steps as r

if TYPE_CHECKING:
    from anatomy.doctor.report.findings import Finding

FILL_OPS = {"masked_fill", "masked_fill_", "where", "add", "add_", "__add__", "__iadd__", "sub"}
ADD_OPS = {"add", "__add__", "add_", "__iadd__", "__radd__"}
NORM_OPS = {"layer_norm", "rms_norm", "batch_norm", "group_norm"}


def _at(step: r.Step, en: str, zh: str) -> dict[str, Any]:
    return {
        "line": step.line,
        "file": step.file,
        "where": f"{os.path.basename(step.file)}:{step.line}",
        "source": step.source,
        "op": step.op,
        "en": en,
        "zh": zh,
    }


def _scale(rec: r.Recording, fault: str) -> list[dict[str, Any]]:
    sc = ob.observed_scale(rec)
    cores = attention_cores(rec)
    if not cores:
        return []
    core = cores[0]
    scaling = [s for s in core.chain if s.op in PASS_OPS and s.op not in FILL_OPS]
    if scaling:
        s = scaling[0]
        value = f" = {sc.value:.4g}" if sc is not None and sc.value is not None else ""
        by = f" (1/sqrt({sc.by}))" if sc is not None and sc.by in ("D", "Dh", "H", "T") else ""
        return [
            _at(
                s,
                f"line {s.line} `{s.source}` scales the scores by{value}{by}; the post divides by "
                "sqrt(d_k), the width of one head",
                f"第 {s.line} 行 `{s.source}` 把分数乘以{value}{by}；博文除以 sqrt(d_k)，即一个头的宽度",
            )
        ]
    at = core.scores or core.softmax
    return [
        _at(
            at,
            f"line {at.line} `{at.source}` makes the scores, and nothing scales them before the softmax "
            f"at line {core.softmax.line}",
            f"第 {at.line} 行 `{at.source}` 计算分数，在第 {core.softmax.line} 行的 softmax 之前没有任何缩放",
        )
    ]


def _split(rec: r.Recording) -> list[dict[str, Any]]:
    out = []
    for dev in ob.deviations(rec):
        if dev["kind"] in ("scores", "view"):
            step = rec.steps[dev["step"]]
            if dev["kind"] == "scores":
                src = _view_before(rec, step)
                if src is not None:
                    out.append(
                        _at(
                            src,
                            f"line {src.line} `{src.source}` splits into heads without transpose(1, 2)",
                            f"第 {src.line} 行 `{src.source}` 拆头时没有 transpose(1, 2)",
                        )
                    )
            out.append(_at(step, dev["seen"], dev["seen_zh"]))
            break
    return out


def _view_before(rec: r.Recording, step: r.Step) -> r.Step | None:
    for i in range(len(step.inputs)):
        src = rec.producer(step, i)
        while src is not None and src.op in ("transpose", "T", "mT", "contiguous"):
            src = rec.producer(src)
        if src is not None and src.op in ("view", "reshape"):
            return src
    return None


def _merge(rec: r.Recording) -> list[dict[str, Any]]:
    for dev in ob.deviations(rec):
        if dev["kind"] in ("merge", "view"):
            return [_at(rec.steps[dev["step"]], dev["seen"], dev["seen_zh"])]
    o = ob.roles(rec)["o"]
    if o is None:
        return []
    src = rec.producer(rec.steps[o.step])
    if src is not None and src.op in r.SHAPE_OPS | {"contiguous"}:
        return [
            _at(
                src,
                f"line {src.line} `{src.source}` merges the heads before the output projection",
                f"第 {src.line} 行 `{src.source}` 在输出投影之前并头",
            )
        ]
    return []


def _mask(rec: r.Recording, fault: str) -> list[dict[str, Any]]:
    cores = attention_cores(rec)
    if not cores:
        return []
    core = cores[0]
    if fault == "mask_after_softmax":
        after = [
            s
            for s in rec.data_steps()
            if s.index > core.softmax.index
            and s.op in FILL_OPS
            and (core.weighted is None or s.index < core.weighted.index)
        ]
        if after:
            s = after[0]
            return [
                _at(
                    s,
                    f"line {s.line} `{s.source}` masks the weights after the softmax at line {core.softmax.line}",
                    f"第 {s.line} 行 `{s.source}` 在第 {core.softmax.line} 行的 softmax 之后才加 mask",
                )
            ]
        return []
    fills = [s for s in core.chain if s.op in FILL_OPS]
    out = [
        _at(
            s,
            f"line {s.line} `{s.source}` applies the mask to the scores",
            f"第 {s.line} 行 `{s.source}` 对分数加 mask",
        )
        for s in fills[:1]
    ]
    if fault == "inf_fill_no_guard":
        s = core.softmax
        out.append(
            _at(
                s,
                f"line {s.line} `{s.source}`: a row with every key masked is all -inf here",
                f"第 {s.line} 行 `{s.source}`：所有键都被遮住的行在这里全是 -inf",
            )
        )
    return out


def _norms(rec: r.Recording, fault: str) -> list[dict[str, Any]]:
    norms = [s for s in rec.data_steps() if s.op in NORM_OPS]
    if fault == "shared_layernorm":
        by_params: dict[tuple[str, ...], list[r.Step]] = {}
        for s in norms:
            by_params.setdefault(tuple(s.params), []).append(s)
        shared = next((v for k, v in by_params.items() if k and len(v) > 1), None)
        if shared:
            return [
                _at(
                    s,
                    f"line {s.line} `{s.source}` uses the norm {s.module or s.params[0]}, shared with line "
                    f"{shared[0].line if s is not shared[0] else shared[1].line}",
                    f"第 {s.line} 行 `{s.source}` 用的 norm（{s.module or s.params[0]}）与另一处共用",
                )
                for s in shared[:2]
            ]
        return []
    if fault == "batchnorm_instead_of_layernorm":
        return [
            _at(
                s,
                f"line {s.line} `{s.source}` normalises over the batch",
                f"第 {s.line} 行 `{s.source}` 在 batch 维上归一化",
            )
            for s in norms
            if s.op == "batch_norm"
        ][:1]
    if fault == "no_residual":
        adds = _residual_adds(rec)
        o = ob.roles(rec)["o"]
        if o is not None:
            s = rec.steps[o.step]
            first = (
                f"; the residual adds the recorder saw are at line(s) {', '.join(str(a.line) for a in adds)}"
                if adds
                else ""
            )
            return [
                _at(
                    s,
                    f"line {s.line} `{s.source}`: the attention's output is not added to its input{first}",
                    f"第 {s.line} 行 `{s.source}`：注意力的输出没有加回它的输入",
                )
            ]
        return []
    return [
        _at(s, f"line {s.line} `{s.source}` normalises here", f"第 {s.line} 行 `{s.source}` 在这里归一化")
        for s in norms[:2]
    ] + [
        _at(a, f"line {a.line} `{a.source}` adds the residual", f"第 {a.line} 行 `{a.source}` 加残差")
        for a in _residual_adds(rec)[:2]
    ]


def _residual_adds(rec: r.Recording) -> list[r.Step]:
    cores = attention_cores(rec)
    last = max((c.weighted.index for c in cores if c.weighted is not None), default=-1)
    return [
        s
        for s in rec.data_steps()
        if s.op in ADD_OPS
        and s.index > last
        and sum(1 for i in s.inputs if not i.source.startswith(("param", "const"))) == 2
    ]


def pointers(rec: r.Recording | None, fault: str | None, probe: str | None = None) -> list[dict[str, Any]]:
    """The learner's lines for a bug-zoo fault (or, without one, for a probe), first the cause."""
    if rec is None:
        return []
    fault = fault or records.for_probe(probe)
    p = records.get(fault)
    if p is None or p.pointer is None:
        return []
    return RULES[p.pointer](rec, p.name)


def _init(rec: r.Recording, fault: str) -> list[dict[str, Any]]:
    return [
        _at(
            rec.steps[p.step],
            f"line {rec.steps[p.step].line} `{rec.steps[p.step].source}` applies {p.weight}",
            f"第 {rec.steps[p.step].line} 行使用 {p.weight}",
        )
        for p in rec.projections[:1]
    ]


DROPOUT_OPS = {"dropout", "dropout_", "feature_dropout", "alpha_dropout", "native_dropout"}
SCALE_OPS = {
    "div",
    "div_",
    "mul",
    "mul_",
    "__truediv__",
    "__mul__",
    "__rmul__",
    "__itruediv__",
    "__imul__",
    "true_divide",
}


def _softmax(rec: r.Recording, fault: str) -> list[dict[str, Any]]:
    """The softmax over scores whose axis is not the last (the keys)."""
    for s in rec.data_steps():
        if s.op in ("softmax", "softmax_", "_softmax", "log_softmax") and s.extra.get("dim") not in (None, -1):
            dims = s.inputs[0].shape if s.inputs else ()
            keys = key_axis(rec, s)  # the axis the weighted sum adds up (an einsum's (B, T, S, H): 2)
            keys = len(dims) - 1 if keys is None and len(dims) else keys
            if len(dims) and s.extra["dim"] % len(dims) == keys:
                continue  # over the keys, counted either way
            last = keys == len(dims) - 1
            return [
                _at(
                    s,
                    f"line {s.line} `{s.source}` takes the softmax over dim={s.extra['dim']} of the {len(dims)}-D "
                    + ("scores; the keys are the last axis (dim=-1)" if last else f"scores; the keys are dim={keys}"),
                    f"第 {s.line} 行 `{s.source}` 在 {len(dims)} 维分数的 dim={s.extra['dim']} 上做 softmax；"
                    + ("键是最后一维（dim=-1）" if last else f"键是 dim={keys}"),
                )
            ]
    return []


def _scale_after(rec: r.Recording, fault: str) -> list[dict[str, Any]]:
    """The step that multiplies or divides the softmax's output before the weighted sum."""
    for core in attention_cores(rec):
        end = core.weighted.index if core.weighted is not None else len(rec.steps)
        for s in rec.data_steps():
            if core.softmax.index < s.index < end and s.op in SCALE_OPS:
                return [
                    _at(
                        s,
                        f"line {s.line} `{s.source}` scales the softmax's output (from line {core.softmax.line}); the "
                        "post scales the scores before the softmax",
                        f"第 {s.line} 行 `{s.source}` 缩放的是第 {core.softmax.line} 行 softmax 的输出；原文在 softmax "
                        "之前缩放分数",
                    )
                ]
    return []


def _dropout(rec: r.Recording, fault: str) -> list[dict[str, Any]]:
    """The dropout that changed its input in eval mode (a module's nn.Dropout in eval is the identity)."""
    for s in rec.data_steps():
        if s.op not in DROPOUT_OPS:
            continue
        src = rec.producer(s)
        before = None if src is None else src.value
        if before is not None and s.value is not None and torch.equal(before, s.value):
            continue  # the identity: a dropout told it is evaluating
        return [
            _at(
                s,
                f"line {s.line} `{s.source}` drops values although the module is in eval mode: pass "
                "training=self.training, or use an nn.Dropout module",
                f"第 {s.line} 行 `{s.source}` 在 eval 模式下仍在丢弃数值：传入 training=self.training，"
                "或使用 nn.Dropout 模块",
            )
        ]
    return []


RULES: dict[
    str, Callable[[r.Recording, str], list[dict[str, Any]]]
] = {  # a record's ``pointer`` -> how to find its lines
    "scale": _scale,
    "scale_after": _scale_after,
    "softmax": _softmax,
    "dropout": _dropout,
    "split": lambda rec, fault: _split(rec),
    "merge": lambda rec, fault: _merge(rec),
    "mask": _mask,
    "norms": _norms,
    "init": _init,
}


def point(findings: list[Finding], rec: r.Recording | None) -> None:
    """Fill ``where`` on each finding (``report.Finding``) that the recording can place; the rest stay empty."""
    if rec is None:
        return
    cache: dict[tuple[str | None, str], list[dict[str, Any]]] = {}
    for f in findings:
        key = (f.fault or f.explained_by, f.probe)
        if key not in cache:
            try:
                cache[key] = pointers(rec, key[0], key[1])
            except Exception:  # noqa: BLE001 - a pointer is a courtesy: never fail the report for it
                cache[key] = []
        if not getattr(f, "where", None):
            f.where = cache[key]
