"""The model's rows grouped as the table shows them: the embedding, the blocks (calls whose rows are alike shown
once, "× L"; a block that differs from the one before says where), what comes after the blocks (final norm, head)
and the loss; and the notes on what the trace could not follow. Read by ``model_trace.py``."""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass, field
from typing import Any, cast

from torch import nn

from anatomy.doctor.trace import model_loss as ml
from anatomy.doctor.trace import model_parts as mp
from anatomy.doctor.trace.learner_labels import Row, collapse_heads, recording_notes
from anatomy.tracing import steps as r

PARTS = ("embed", "block", "final", "loss")


@dataclass
class Group:
    part: str  # "embed", "block", "final", "loss"
    rows: list[mp.ModelRow]
    layers: list[int] = field(default_factory=list)  # blocks: the layers this group stands for
    path: str = ""  # blocks: the first layer's module path ("transformer.h.0")
    block_type: str = ""  # blocks: its class name
    differs: tuple[str, str] = ("", "")  # blocks: how it differs from the group of blocks before it (en, zh)

    @property
    def repeat(self) -> int:
        return len(self.layers)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["rows"] = [row.to_dict() for row in self.rows]
        out["differs"] = {"en": self.differs[0], "zh": self.differs[1]} if self.differs[0] else None
        return out


def learner_file(rec: r.Recording) -> str:
    """The file most data steps come from (the learner's)."""
    files = [s.file for s in rec.data_steps() if s.file]
    return max(set(files), key=files.count) if files else ""


def _relative(row: mp.ModelRow, path: str) -> str:
    return (
        row.module[len(path) + 1 :] if row.module.startswith(path + ".") else "" if row.module == path else row.module
    )


def _signature(rows: list[mp.ModelRow], path: str) -> list[tuple[Any, ...]]:
    return [(x.line, x.op, x.dims, tuple(x.shape), x.kind, x.role, x.label, _relative(x, path), x.repeat) for x in rows]


def _per_call(rows: list[mp.ModelRow], calls: list[mp.Call], h: int) -> list[list[mp.ModelRow]]:
    """Each call's rows (steps between two calls go with the one before), heads of a per-head ModuleList once."""
    out: list[list[mp.ModelRow]] = []
    for i, c in enumerate(calls):
        stop = calls[i + 1].start if i + 1 < len(calls) else c.end
        mine = [copy.copy(x) for x in rows if x.part == "block" and c.start <= x.step < max(stop, c.end)]
        for x in mine:  # collapse_heads reads the module path: make it the block's own (heads.0, not h.1.heads.0)
            x.module = _relative(x, c.path)
        kept = cast(list[mp.ModelRow], collapse_heads(cast(list[Row], mine), h))
        for x in kept:
            x.module = f"{c.path}.{x.module}" if x.module else c.path
        out.append(kept)
    return out


def _difference(a: list[mp.ModelRow], b: list[mp.ModelRow], pa: str, pb: str, layers: str) -> tuple[str, str]:
    sa, sb = _signature(a, pa), _signature(b, pb)
    k = next((i for i, (x, y) in enumerate(zip(sa, sb)) if x != y), min(len(sa), len(sb)))
    if k < len(sb):
        row = b[k]
        other = f"`{a[k].source}` {a[k].op} {a[k].dims}" if k < len(a) else "nothing"
        return (
            f"differs from layers {layers} at its row {k + 1}: line {row.line} `{row.source}` {row.op} {row.dims} "
            f"where they run {other}",
            f"与第 {layers} 层在第 {k + 1} 行不同：第 {row.line} 行 `{row.source}` {row.op} {row.dims}，"
            f"而它们那里是 {other}",
        )
    row = a[k]
    return (
        f"differs from layers {layers}: it stops before their row {k + 1}, line {row.line} `{row.source}` {row.op}",
        f"与第 {layers} 层不同：少了它们的第 {k + 1} 行，第 {row.line} 行 `{row.source}` {row.op}",
    )


def span(layers: list[int]) -> str:
    """``0-2``, ``1``, ``0, 2``."""
    if len(layers) > 1 and layers == list(range(layers[0], layers[-1] + 1)):
        return f"{layers[0]}-{layers[-1]}"
    return ", ".join(map(str, layers))


def block_groups(rows: list[mp.ModelRow], calls: list[mp.Call], types: dict[str, str], h: int) -> list[Group]:
    """The table's groups in order: embedding, runs of alike blocks, after the blocks, loss."""
    groups = [Group("embed", [x for x in rows if x.part == "embed"])]
    per = _per_call(rows, calls, h)
    blocks: list[tuple[Group, list[tuple[Any, ...]]]] = []
    for c, mine in zip(calls, per):
        sig = _signature(mine, c.path)
        if blocks and blocks[-1][1] == sig:
            blocks[-1][0].layers.append(c.layer)
            continue
        g = Group("block", mine, [c.layer], c.path, types.get(c.path, ""))
        if blocks:
            prev = blocks[-1][0]
            g.differs = _difference(prev.rows, mine, prev.path, c.path, span(prev.layers))
        blocks.append((g, sig))
    for g, _sig in blocks:
        for x in g.rows:
            x.layers = list(g.layers)
        groups.append(g)
    groups.append(Group("final", [x for x in rows if x.part == "final"]))
    groups.append(Group("loss", [x for x in rows if x.part == "loss"]))
    return [g for g in groups if g.rows or g.part == "block"]


def notes_for(
    rec: r.Recording, blocks: list[tuple[str, nn.Module]], calls: list[mp.Call], loss: ml.Loss, sizes: dict[str, int]
) -> list[tuple[str, str]]:
    notes = []
    if not blocks:
        notes.append(
            (
                "no stack of blocks (a ModuleList or Sequential of modules) was found: the steps are shown in order",
                "没有找到块的堆叠（由模块组成的 ModuleList 或 Sequential）：各步骤按顺序列出",
            )
        )
    ran = {c.path for c in calls}
    idle = [p for p, _m in blocks if p not in ran]
    if idle:
        notes.append(
            (
                f"{len(idle)} block(s) never ran in the forward: {', '.join(idle)}",
                f"有 {len(idle)} 个块在 forward 中从未运行：{', '.join(idle)}",
            )
        )
    same = rec.names.ambiguous()
    if same:
        notes.append(
            (
                f"sizes shared by several names ({', '.join(same)}): those axes are named by the data where it can "
                "tell them apart; choose sizes that differ",
                f"有几个名字共用同一个大小（{', '.join(same)}）：这些轴尽量按数据来源命名；请选择彼此不同的大小",
            )
        )
    if not loss.found:
        notes.append(
            (
                f"no loss: {loss.why} (the trace passes targets as `targets`, `labels` or `y`)",
                f"没有损失：{ml.why_zh(loss.why)}（追踪时以 `targets`、`labels` 或 `y` 传入目标）",
            )
        )
    return notes + recording_notes(rec)
