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
import re
from dataclasses import asdict, dataclass, field

import torch

from anatomy.doctor.contract.calls import detect_seq_first, first_call
from anatomy.doctor.loading.isolation import isolated, require_sizes
from anatomy.doctor.loading.limits import Hung, guard
from anatomy.doctor.loading.subject import CallError, CheckError, CheckTimeout, Subject, _quiet, build, randomize
from anatomy.doctor.recording import observed as ob
from anatomy.doctor.trace.learner_trace_text import render
from anatomy.tracing import steps as r
from anatomy.tracing.dims import letters
from anatomy.tracing.recorder import record

SCHEMA = "anatomy.trace.learner/1"
NORM_OPS = {"layer_norm", "rms_norm", "group_norm", "batch_norm"}
ACT_OPS = {"relu", "gelu", "silu", "tanh", "sigmoid", "elu", "leaky_relu", "mish", "softplus"}


@dataclass
class Row:
    step: int
    line: int
    source: str
    op: str
    kind: str  # the post's step ("proj", "split", "scores", ...) or ""
    role: str  # "q", "k", "v", "o", "" (projections)
    shape: list[int]
    dims: str
    params: list[str] = field(default_factory=list)
    module: str = ""
    deviation: str = ""  # "first" on the first step that leaves the post's flow, "also" on later ones
    repeat: int = 1  # H for one module per head: the same step in heads.0 .. heads.{H-1}, shown once "× H"

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class LearnerTrace:
    target: str
    file: str
    sizes: dict
    call: str
    rows: list[Row]
    deviations: list[dict]
    unfollowed: list[str]
    notes: list[tuple[str, str]]  # (en, zh): what the reader should know (ambiguous sizes, a fused call)
    recording: r.Recording = field(repr=False)

    @property
    def deviation(self) -> dict | None:
        return self.deviations[0] if self.deviations else None

    def to_dict(self) -> dict:
        return {
            "schema": SCHEMA,
            "target": self.target,
            "file": self.file,
            "sizes": self.sizes,
            "call": self.call,
            "rows": [row.to_dict() for row in self.rows],
            "deviation": self.deviation,
            "deviations": self.deviations,
            "unfollowed": self.unfollowed,
            "notes": [{"en": en, "zh": zh} for en, zh in self.notes],
        }

    def render(self, fmt: str = "table", lang: str = "en") -> str:
        if fmt == "json":
            return json.dumps(self.to_dict(), indent=2, ensure_ascii=False)
        return render(self, fmt, lang)


def trace_learner(
    target,
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


def _trace(target, factory, d, h, b, t, seed, timeout) -> LearnerTrace:
    module, label = build(target, factory, d, h, seed, timeout)
    subject = Subject.inspect(module, label)
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


def _seq_first(subject: Subject, x: torch.Tensor, timeout) -> bool:
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


def _record(module, subject: Subject, label: str, x: torch.Tensor, sizes: dict, timeout, x_dims: str = "B T D"):
    """Record ``forward(x)`` (q = k = v = x for ``forward(query, key, value)``; ``mask=None`` when the mask has no
    default); when that raises and the forward takes a mask, once more with an all-visible boolean mask."""
    b, t = (x.shape[1], x.shape[0]) if x_dims == "T B D" else x.shape[:2]
    args = [x, x, x] if subject.qkv else [x]
    base = "forward(x, x, x" if subject.qkv else "forward(x"
    tries: list[tuple[str, list, dict, torch.Tensor | None]] = []
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

        def describe(call=call) -> tuple[str, str]:
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


def _extra_transposes(rec: r.Recording, devs: list[dict]) -> list[dict]:
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


def _output_deviation(rec: r.Recording, steps: list[r.Step], shape: tuple) -> list[dict]:
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


def _rows(rec: r.Recording, steps: list[r.Step], devs: list[dict]) -> list[Row]:
    kinds = label_steps(rec)
    first = devs[0]["step"] if devs else None
    also = {d["step"] for d in devs[1:]}
    rows = []
    for s in steps:
        kind, role = kinds.get(s.index, ("", ""))
        out = s.outputs[0]
        rows.append(
            Row(
                s.index,
                s.line,
                s.source,
                s.op,
                kind,
                role,
                list(out.shape),
                letters(out.dims),
                s.params,
                s.module,
                "first" if s.index == first else "also" if s.index in also else "",
            )
        )
    return collapse_heads(rows, rec.sizes.get("H", 0))


_HEAD = re.compile(r"^(?P<pre>.*?)\.(?P<i>\d+)(?P<post>(\..*)?)$")


def collapse_heads(rows: list[Row], h: int) -> list[Row]:
    """One module per head (``heads.0`` .. ``heads.{H-1}``, the video lecture's ModuleList) prints H identical
    blocks: keep head 0's rows, each with ``repeat`` = the number of heads that ran the same step (same line, op,
    shape); the other heads' rows go. Only exactly ``h`` copies count (``sublayer.0``/``.1`` or the annotated
    transformer's ``linears.0..3`` are not heads). A row that leaves the post's flow is kept wherever it is."""

    def key(row: Row):
        m = _HEAD.match(row.module)
        return None if m is None else (m["pre"], m["post"], row.line, row.op, row.dims)

    count: dict = {}
    for row in rows:
        k = key(row)
        if k is not None:
            count[k] = count.get(k, 0) + 1
    kept = []
    for row in rows:
        k = key(row)
        m = _HEAD.match(row.module)
        if k is None or count[k] != h or h < 2:
            kept.append(row)
        elif m is not None and m["i"] == "0":
            row.repeat = count[k]
            kept.append(row)
        elif row.deviation:
            kept.append(row)
    return kept


def label_steps(rec: r.Recording) -> dict[int, tuple[str, str]]:
    """step index → (the post's step, role) from the dataflow: projections by what they feed, the views between a
    projection and the scores (split), the scores, their scale and mask, softmax, weighted sum, merge, residual
    adds, norms and the FFN."""
    out: dict[int, tuple[str, str]] = {}
    roles = ob.roles(rec)
    cores = ob.attention_cores(rec)
    for role in ("q", "k", "v"):
        for p in roles[role]:
            before = out.get(p.step, ("", ""))[1]
            out[p.step] = ("proj", f"{before}|{role}" if before else role)  # a fused projection: q|k|v
    if roles["o"] is not None:
        out[roles["o"].step] = ("out", "o")
    first_scores = min(((c.scores or c.softmax).index for c in cores), default=None)  # sdpa: the fused call
    for core in cores:
        if core.scores is not None:
            out[core.scores.index] = ("scores", "")
            for s in core.chain:
                out[s.index] = (
                    "mask"
                    if "fill" in s.op or s.op in ("where", "add", "add_", "__add__", "sub")
                    else "cast"
                    if s.op in r.SAME_OPS
                    else "scale",
                    "",
                )
        out[core.softmax.index] = ("softmax" if core.softmax.op not in r.SDPA_OPS else "fused", "")
        if core.weighted is not None and core.weighted is not core.softmax:
            out[core.weighted.index] = ("z", "")
    proj_steps = {p.step for role in ("q", "k", "v") for p in roles[role]}
    last_z = max((c.weighted.index if c.weighted else c.softmax.index for c in cores), default=None)
    o_step = roles["o"].step if roles["o"] is not None else None
    for s in rec.data_steps():
        if s.index in out:
            continue
        src = rec.producer(s)
        if (
            s.op in r.VIEW_OPS
            and src is not None
            and src.index in out
            and len(src.outputs[0].shape) == 2
            and out[src.index][0] in ("proj", "out")
        ):
            out[s.index] = out[src.index]  # GPT-2's Conv1D: addmm on (B*T, D), then back to (B, T, ...)
            continue
        shaping = s.op in r.SHAPE_OPS or s.op in ("contiguous",)
        users = [u for u in rec.steps[s.index + 1 :] if any(i.source == f"step {s.index}" for i in u.inputs)]
        in_scores = users and all(out.get(u.index, ("",))[0] == "scores" and u.line == s.line for u in users)
        if s.op in ("transpose", "T", "mT") and in_scores:
            continue  # k.transpose(-2, -1) inside the scores' line: part of Q K^T
        if shaping and first_scores is not None and s.index < first_scores and proj_steps and s.index > min(proj_steps):
            out[s.index] = ("split", "")
        elif shaping and last_z is not None and s.index > last_z and (o_step is None or s.index < o_step):
            out[s.index] = ("merge", "")
        elif s.op in NORM_OPS:
            out[s.index] = ("norm", "")
        elif s.op in ACT_OPS:
            out[s.index] = ("act", "")
        elif (
            s.op in ("add", "__add__", "add_", "__iadd__", "__radd__")
            and s.outputs[0].dims in (("B", "T", "D"), ("T", "B", "D"))
            and sum(1 for i in s.inputs if i.source != "const" and not i.source.startswith("param")) == 2
        ):
            out[s.index] = ("add", "")
        elif s.op in r.SAME_OPS and s.op not in ("dropout", "contiguous", "clone", "detach"):
            out[s.index] = ("cast", "")
    _hand_written_norms(rec, out)
    after = [p for p in rec.projections if o_step is not None and p.step > o_step]
    d = rec.sizes.get("D")
    for p in after:  # the FFN: a widening projection, then the one back to D
        if p.n_features != d:
            out[p.step] = ("hidden", "")
        elif p.n_in != d:
            out[p.step] = ("ffn", "")
    return out


def _hand_written_norms(rec: r.Recording, out: dict) -> None:
    """A norm written by hand (``a_2 * (x - mean) / (std + eps) + b_2`` in a class named ``LayerNorm``): the last
    step of each call of a module whose class name says norm is the norm's output."""
    steps = rec.data_steps()
    for i, s in enumerate(steps):
        name = rec.module_types.get(s.module, "")
        if "norm" not in name.lower() or s.op in NORM_OPS:
            continue
        nxt = steps[i + 1] if i + 1 < len(steps) else None
        if nxt is None or nxt.module != s.module:
            out[s.index] = ("norm", "")


def _notes(rec: r.Recording, sizes: dict) -> list[tuple[str, str]]:
    notes = []
    same = rec.names.ambiguous()
    if same:
        notes.append(
            (
                f"sizes shared by several names ({', '.join(same)}): those axes are named by the data where "
                "it can tell them apart; choose --d-model/--heads/--batch/--seq that differ",
                f"有几个名字共用同一个大小（{', '.join(same)}）：这些轴尽量按数据来源命名；"
                "请选择彼此不同的 --d-model/--heads/--batch/--seq",
            )
        )
    fused = [s for s in rec.data_steps() if s.op == "multi_head_attention_forward"]
    if fused:
        notes.append(
            (
                f"line {fused[0].line}: torch.nn.MultiheadAttention runs as one call, so its split, scores "
                "and softmax are not separate steps; `anatomy check` reads its weights by name "
                "(in_proj_weight, out_proj)",
                f"第 {fused[0].line} 行：torch.nn.MultiheadAttention 是"
                "一次调用，拆头、打分和 softmax 不会分成单独的步骤；`anatomy check` 会按名字读取它的权重"
                "（in_proj_weight、out_proj）",
            )
        )
    elif not ob.attention_cores(rec):
        notes.append(
            (
                "no softmax was recorded: this module has no attention the recorder could follow (computed "
                "outside torch, or not an attention module); `anatomy check --map` can still name its weights",
                "没有记录到 softmax：这个模块里没有记录器能跟踪的注意力（在 torch 之外计算，或者不是注意力"
                "模块）；`anatomy check --map` 仍可指定它的权重",
            )
        )
    if rec.truncated:
        notes.append(
            (
                f"the forward ran more than {r.MAX_STEPS} tensor operations: only the first were recorded",
                f"forward 执行了超过 {r.MAX_STEPS} 个张量运算：只记录了前面这些",
            )
        )
    if rec.unfollowed:
        notes.append(
            (
                f"{len(rec.unfollowed)} operation(s) could not be read: {rec.unfollowed[0]}",
                f"有 {len(rec.unfollowed)} 个操作无法读取：{rec.unfollowed[0]}",
            )
        )
    return notes
