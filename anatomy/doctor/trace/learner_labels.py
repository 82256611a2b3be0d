"""What each step of a learner's recorded forward is in the post's terms (``label_steps``: projections, split,
scores, scale, mask, softmax, weighted sum, merge, residual, norms), heads of a per-head ModuleList shown once
(``collapse_heads``), and the trace's notes on what it could not follow. Read by ``learner_trace.py``."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, TypeVar

from anatomy.doctor.recording import observed as ob
from anatomy.doctor.recording.cores import attention_cores
from anatomy.tracing import steps as r

NORM_OPS = {"layer_norm", "rms_norm", "group_norm", "batch_norm"}
ACT_OPS = {"relu", "gelu", "silu", "tanh", "sigmoid", "elu", "leaky_relu", "mish", "softplus"}


R = TypeVar("R", bound="Row")


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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def of_step(
        cls: type[R], s: Any, kind: str, role: str, deviation: str, dims: Callable[[Any], str], **extra: Any
    ) -> R:
        """The row of recorded step ``s``: its first output's shape, named by ``dims``."""
        out = s.outputs[0]
        shape, named = list(out.shape), dims(out.dims)
        return cls(s.index, s.line, s.source, s.op, kind, role, shape, named, s.params, s.module, deviation, **extra)


_HEAD = re.compile(r"^(?P<pre>.*?)\.(?P<i>\d+)(?P<post>(\..*)?)$")


def collapse_heads(rows: list[Row], h: int) -> list[Row]:
    """One module per head (``heads.0`` .. ``heads.{H-1}``, the video lecture's ModuleList) prints H identical
    blocks: keep head 0's rows, each with ``repeat`` = the number of heads that ran the same step (same line, op,
    shape); the other heads' rows go. Only exactly ``h`` copies count (``sublayer.0``/``.1`` or the annotated
    transformer's ``linears.0..3`` are not heads). A row that leaves the post's flow is kept wherever it is."""

    def key(row: Row) -> tuple[str, str, int, str, str] | None:
        m = _HEAD.match(row.module)
        return None if m is None else (m["pre"], m["post"], row.line, row.op, row.dims)

    count: dict[tuple[str, str, int, str, str] | None, int] = {}
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
    cores = attention_cores(rec)
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


def _hand_written_norms(rec: r.Recording, out: dict[int, tuple[str, str]]) -> None:
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


def _notes(rec: r.Recording, sizes: dict[str, int]) -> list[tuple[str, str]]:
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
    elif not attention_cores(rec):
        notes.append(
            (
                "no softmax was recorded: this module has no attention the recorder could follow (computed "
                "outside torch, or not an attention module); `anatomy check --map` can still name its weights",
                "没有记录到 softmax：这个模块里没有记录器能跟踪的注意力（在 torch 之外计算，或者不是注意力"
                "模块）；`anatomy check --map` 仍可指定它的权重",
            )
        )
    return notes + recording_notes(rec)


def recording_notes(rec: r.Recording) -> list[tuple[str, str]]:
    """What the recording could not hold: operations past the cap, operations it could not read; (en, zh) each."""
    notes: list[tuple[str, str]] = []
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
