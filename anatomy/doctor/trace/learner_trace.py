"""``anatomy trace FILE.py:CLASS``: the post's §5.1 table for the learner's own code, one row per recorded step.

    from anatomy.doctor.trace.learner_trace import trace_learner
    t = trace_learner("my_attention.py:MultiHeadAttention")      # built as CLASS(20, 5): d_model, n_heads
    for row in t.rows: print(row.line, row.source, row.dims)     # 21 q = self.W_q(x).view(...) (B, T, H, Dh)
    t.deviation                                                  # the first step that leaves the post's flow
    print(t.render("table", lang="zh"))

The module is run once on ``x: (B, T, D)`` with sizes that are all different (B=2, T=7, H=5, Dh=4, D=20 by
default), so every axis can be named by the legend's letters; the recorder (``anatomy.tracing``) gives each step
with the learner's file and line. Each row is labelled with the post's step it belongs to (projection, split,
scores, softmax, weighted sum, merge, output projection, residual, norm, FFN) when the dataflow shows it, and the
first step where the flow leaves the post's is marked, with what the post expected there (``observed.py``).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from anatomy.doctor.contract.calls import detect_seq_first, first_call
from anatomy.doctor.loading.building import Target, build, randomize
from anatomy.doctor.loading.isolation import isolated, require_sizes
from anatomy.doctor.loading.limits import Hung, guard
from anatomy.doctor.loading.subject import CallError, CheckedModule, CheckError, CheckTimeout, _quiet
from anatomy.doctor.recording import observed as ob
from anatomy.doctor.trace.learner_labels import Row, _notes, collapse_heads, label_steps
from anatomy.doctor.trace.learner_trace_text import render
from anatomy.tracing import steps as r
from anatomy.tracing.dims import letters
from anatomy.tracing.recorder import record

SCHEMA = "anatomy.trace.learner/1"


@dataclass
class LearnerTrace:
    target: str
    file: str
    sizes: dict[str, Any]
    call: str
    rows: list[Row]
    deviations: list[dict[str, Any]]
    unfollowed: list[str]
    notes: list[tuple[str, str]]  # (en, zh): what the reader should know (ambiguous sizes, a fused call)
    recording: r.Recording = field(repr=False)

    @property
    def deviation(self) -> dict[str, Any] | None:
        return self.deviations[0] if self.deviations else None

    def to_dict(self) -> dict[str, Any]:
        return trace_dict(self, {"schema": SCHEMA}, {"rows": [row.to_dict() for row in self.rows]})

    def render(self, fmt: str = "table", lang: str = "en") -> str:
        if fmt == "json":
            return json.dumps(self.to_dict(), indent=2, ensure_ascii=False)
        return render(self, fmt, lang)


def trace_dict(trace: Any, head: dict[str, Any], body: dict[str, Any]) -> dict[str, Any]:
    """The JSON of a module's or a model's trace: ``head`` (schema, kind), what was called, ``body`` (the rows), then
    the deviations and notes, in that order."""
    return {
        **head,
        "target": trace.target,
        "file": trace.file,
        "sizes": trace.sizes,
        "call": trace.call,
        **body,
        "deviation": trace.deviation,
        "deviations": trace.deviations,
        "unfollowed": trace.unfollowed,
        "notes": [{"en": en, "zh": zh} for en, zh in trace.notes],
    }


def trace_learner(
    target: Target,
    *,
    factory: str | None = None,
    d_model: int = 20,
    n_heads: int = 5,
    batch: int = 2,
    seq: int = 7,
    seed: int = 0,
    timeout: float | None = 60.0,
) -> LearnerTrace:
    """Build ``target`` (``FILE.py:CLASS``, a class, a factory or a module) as the doctor does, run it once under
    the recorder and return the table. Raises :class:`CheckError` (one line) when it cannot be loaded, built, run
    or followed; :class:`CheckTimeout` past ``timeout`` seconds."""
    require_sizes(d_model, n_heads, batch=batch, seq=seq)
    with isolated(seed):
        return _trace(target, factory, d_model, n_heads, batch, seq, seed, timeout or None)


def _trace(
    target: Target, factory: str | None, d: int, h: int, b: int, t: int, seed: int, timeout: float | None
) -> LearnerTrace:
    module, label = build(target, factory, d, h, seed, timeout)
    subject = CheckedModule.inspect(module, label)
    x = torch.randn(b, t, d, generator=torch.Generator().manual_seed(seed + 1), dtype=torch.float64)
    if any(isinstance(p, torch.nn.parameter.UninitializedParameter) for p in module.parameters()):
        try:  # nn.LazyLinear: its shapes come from a first forward
            subject.timeout = timeout
            subject.run(x)
        except CallError as err:
            raise CheckError(f"{label}: the warm-up forward of a lazy module raised {err}") from None
    randomize(module, d, seed)
    sizes = r.sizes_for(d, h, b, t)
    seq_first = _seq_first(subject, x, timeout)
    rec, call, note = _record(
        module, subject, label, x.transpose(0, 1) if seq_first else x, sizes, timeout, "T B D" if seq_first else "B T D"
    )
    file = _learner_file(rec)
    steps = [s for s in rec.data_steps() if not file or s.file == file or s.file.startswith(os.path.dirname(file))]
    if not steps:
        raise CheckError(
            f"{label}: the recorder saw no tensor operation on x: the forward does not compute with "
            "torch on its input (numpy, .tolist() or .item() hide it), so there is nothing to trace; "
            "`anatomy check --map` can still compare its weights"
        )
    devs = _extra_transposes(rec, ob.deviations(rec)) + _output_deviation(
        rec, steps, (t, b, d) if seq_first else tuple(x.shape)
    )
    rows = _rows(rec, steps, devs)
    notes = ([note] if note else []) + _notes(rec, sizes)
    return LearnerTrace(label, file, sizes, call, rows, devs, rec.unfollowed, notes, rec)


MASK_LAYOUTS = ("(B, 1, 1, S)", "(B, 1, T, S)", "(B, T, S)", "(B, S)")


def _seq_first(subject: CheckedModule, x: torch.Tensor, timeout: float | None) -> bool:
    """Does the module take ``(T, B, D)``? The check's own detection (``contract/calls.py``): fed ``(B, T, D)`` it
    mixes the batch's sequences, fed ``(T, B, D)`` it does not."""
    subject.timeout = timeout
    subject.stage = ("the sequence-first detection, while tracing", "追踪时的序列优先检测")
    try:
        first_call(subject, x)
        base, _ = subject.run(x)
    except CallError:
        return False
    return detect_seq_first(subject, x, base, 1e-9 * max(1.0, float(base.abs().nan_to_num(0).max())))


def _record(
    module: nn.Module,
    subject: CheckedModule,
    label: str,
    x: torch.Tensor,
    sizes: dict[str, Any],
    timeout: float | None,
    x_dims: str = "B T D",
) -> tuple[r.Recording, str, tuple[str, str] | None]:
    """Record ``forward(x)`` (q = k = v = x for ``forward(query, key, value)``; ``mask=None`` when the mask has no
    default); when that raises and the forward takes a mask, once more with an all-visible boolean mask."""
    b, t = (x.shape[1], x.shape[0]) if x_dims == "T B D" else x.shape[:2]
    args: list[object] = [x, x, x] if subject.qkv else [x]
    base = "forward(x, x, x" if subject.qkv else "forward(x"
    tries: list[tuple[str, list[object], dict[str, Any], torch.Tensor | None]] = []
    if subject.mask_required:
        tries.append((base + (f", {subject.mask_kw}=None)" if subject.mask_kw else ", None)"), args, {}, None))
    else:
        tries.append((base + ")", args, {}, None))
    if subject.takes_mask:
        for layout in MASK_LAYOUTS:
            shape = {
                "(B, 1, 1, S)": (b, 1, 1, t),
                "(B, 1, T, S)": (b, 1, t, t),
                "(B, T, S)": (b, t, t),
                "(B, S)": (b, t),
            }[layout]
            tries.append((base + f", mask {layout} all visible)", args, {}, torch.ones(shape, dtype=torch.bool)))
    first_error = None
    for call, a, kw, mask in tries:
        if mask is not None or subject.mask_required:
            kw, a = ({subject.mask_kw: mask}, a) if subject.mask_kw else ({}, [*a, mask])

        def describe(call: str = call) -> tuple[str, str]:
            return (
                f"{label}: {call} on x of shape {tuple(x.shape)}, while tracing,",
                f"{label}：追踪时 {call}（x 形状 {tuple(x.shape)}）",
            )

        try:
            with _quiet(), guard(timeout, describe):
                rec = record(
                    module,
                    *a,
                    sizes=sizes,
                    dims=[x_dims] * len(args),
                    names=["x"] * len(args),
                    kwargs=kw,
                    tag_kwargs=False,
                )
        except Hung as hung:
            raise CheckTimeout.from_hung(hung) from None
        except r.RecordError as err:
            first_error = first_error or f"{label}: {call} on x of shape (B, T, D) = {tuple(x.shape)}: {err}"
            continue
        if x_dims == "T B D":
            call = call.replace("forward(x", "forward(x as (T, B, D)", 1)
        if call == tries[0][0] or call.replace(" as (T, B, D)", "") == tries[0][0]:
            return (
                rec,
                call,
                (
                    (
                        "the module is sequence-first: traced on x as (T, B, D)",
                        "模块按序列优先排布：以 (T, B, D) 的 x 追踪",
                    )
                    if x_dims == "T B D"
                    else None
                ),
            )
        return (
            rec,
            call,
            (
                f"traced as {call}, because {first_error}",
                f"追踪时改用 {call}（传入一个全部可见的 mask），因为 {first_error}",
            ),
        )
    raise CheckError(first_error)


def _extra_transposes(rec: r.Recording, devs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A view that moves numbers between axes right after two transposes that undo each other is not a missing
    transpose but one too many: say so (``.transpose(1, 2).transpose(1, 2)`` before the merge)."""
    out = []
    for dev in devs:
        step = rec.steps[dev["step"]] if dev.get("kind") == "view" and dev.get("step") is not None else None
        second = rec.producer(step) if step is not None else None
        first = rec.producer(second) if second is not None else None
        if (
            second is not None
            and first is not None
            and second.op in r.PERMUTE_OPS
            and first.op in r.PERMUTE_OPS
            and first.inputs[0].dims == second.outputs[0].dims
        ):
            dims = letters(second.outputs[0].dims)
            dev = {
                **dev,
                "kind": "extra_transpose",
                "seen": f"two transposes on line {first.line} undo each other, so the view gets {dims} back: one "
                "transpose too many (not a missing one)",
                "seen_zh": f"第 {first.line} 行的两个 transpose 互相抵消，view 拿到的又是 {dims}：多了一个 transpose"
                "（而不是少了一个）",
            }
        out.append(dev)
    return out


def _output_deviation(rec: r.Recording, steps: list[r.Step], shape: tuple[int, ...]) -> list[dict[str, Any]]:
    """The output must keep the input's shape (B, T, D): every sub-layer of the post's block does."""
    out = rec.output[0] if isinstance(rec.output, (tuple, list)) and rec.output else rec.output
    if not isinstance(out, torch.Tensor) or tuple(out.shape) == shape:
        return []
    m = rec.meta_of(out)
    last = rec.steps[m.producer] if m is not None and m.producer >= 0 else steps[-1]
    dims = letters(m.dims) if m is not None else str(tuple(out.shape))
    return [
        {
            "step": last.index,
            "kind": "output",
            "line": last.line,
            "file": last.file,
            "source": last.source,
            "op": last.op,
            "dims": dims,
            "seen": f"the output is {dims} = {tuple(out.shape)}",
            "seen_zh": f"输出是 {dims} = {tuple(out.shape)}",
            "expected": "the output keeps the input's shape (B, T, D)",
            "expected_zh": "输出保持输入的形状 (B, T, D)",
        }
    ]


def _learner_file(rec: r.Recording) -> str:
    """The file most steps come from (the learner's)."""
    files = [s.file for s in rec.data_steps() if s.file]
    return max(set(files), key=files.count) if files else ""


def _rows(rec: r.Recording, steps: list[r.Step], devs: list[dict[str, Any]]) -> list[Row]:
    kinds = label_steps(rec)
    first = devs[0]["step"] if devs else None
    also = {d["step"] for d in devs[1:]}
    rows = []
    for s in steps:
        kind, role = kinds.get(s.index, ("", ""))
        deviation = "first" if s.index == first else "also" if s.index in also else ""
        rows.append(Row.of_step(s, kind, role, deviation, letters))
    return collapse_heads(rows, rec.sizes.get("H", 0))
