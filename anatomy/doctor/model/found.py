"""Model findings: a :class:`~anatomy.doctor.report.findings.Finding` that also says which layers it holds in, the
block doctor's findings folded across layers ("layers 0-5"), and the learner's lines behind a model-level finding
(an op log of one forward: every torch call with the learner's file and line, ``anatomy.tracing``'s frame rule)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from anatomy.doctor.report.findings import PROBE_TITLES, Finding, Report
from anatomy.tracing.ops import op_name
from anatomy.tracing.steps import Frame, learner_frames

__anatomy_transparent__ = True

PROBE_TITLES.update(  # the model's probes, titled in the report as the block doctor's are
    {
        "lm_causal_leak": ("causal leak through the model", "整个模型的因果泄漏"),
        "lm_loss": ("the model's loss", "模型的损失"),
        "lm_positions": ("positions", "位置"),
        "lm_mask_lengths": ("causal mask at every length", "各长度下的因果 mask"),
        "lm_padding": ("padding", "padding"),
        "lm_pads_in_loss": ("pads in the loss", "损失中的 pad"),
        "lm_eval": ("deterministic in eval()", "eval() 下结果确定"),
        "lm_tying": ("tied embedding and head", "嵌入与输出头绑定"),
        "lm_final_norm": ("final norm", "最后的 Norm"),
        "lm_generate": ("the model's own generate", "模型自带的 generate"),
        "lm_cache": ("forward through its cache (use_cache=True)", "经过缓存的前向（use_cache=True）"),
        "lm_blocks": ("the blocks", "各个 block"),
    }
)


@dataclass
class ModelFinding(Finding):
    layers: list[int] = field(default_factory=list)  # the blocks it holds in (empty: the model as a whole)
    layer: int | None = None  # the first layer where it appears (a causal leak)

    @property
    def lineno(self) -> int | None:
        """The learner's first line behind it (None: no pointer)."""
        return next((int(w["line"]) for w in self.where if w.get("line")), None)

    @property
    def line(self) -> str | None:
        """The source text of :attr:`lineno`."""
        return next((str(w.get("source") or "") for w in self.where if w.get("line")), None)

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "layers": self.layers, "layer": self.layer}


def span(layers: list[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``"0-2, 5"``."""
    parts: list[str] = []
    for i in sorted(layers):
        if parts and parts[-1].split("-")[-1] == str(i - 1):
            parts[-1] = f"{parts[-1].split('-')[0]}-{i}"
        else:
            parts.append(str(i))
    return ", ".join(parts)


def layer_words(layers: list[int], n: int) -> tuple[str, str]:
    if len(layers) == 1:
        return f"layer {layers[0]}", f"第 {layers[0]} 层"
    every = len(layers) == n and n > 1
    return (
        f"layers {span(layers)}" + (" (every layer)" if every else ""),
        f"第 {span(layers)} 层" + ("（每一层）" if every else ""),
    )


def fold(reports: list[Report | None], n: int) -> list[ModelFinding]:
    """The block doctor's findings of every layer, identical ones (same probe, fault, severity) folded into one
    that names its layers."""
    groups: dict[tuple[Any, ...], tuple[Finding, list[int]]] = {}
    for i, rep in enumerate(reports):
        if rep is None:
            continue
        for f in rep.findings:
            key = (f.probe, f.severity, f.fault, f.explained_by)
            groups.setdefault(key, (f, []))[1].append(i)
    out = []
    for f, layers in groups.values():
        en, zh = layer_words(layers, n)
        out.append(
            ModelFinding(
                f.probe,
                f.severity,
                f"{en}: {f.en}",
                f"{zh}：{f.zh}",
                dict(f.evidence),
                fault=f.fault,
                explained_by=f.explained_by,
                where=list(f.where),
                layers=layers,
            )
        )
    return out


@dataclass
class Op:
    op: str
    file: str
    line: int
    source: str
    shape: tuple[int, ...]
    changed: bool | None = None  # a dropout: did it change its input; SDPA: dropout_p > 0 (None: neither)
    at_zero: bool = False  # one position read at 0: arange(0, 1), or row 0 of a table (a positional one?)
    ignore_index: int | None = None  # a cross_entropy / nll_loss: the target id it ignores
    caller: Frame | None = None  # the learner's line in the same file that called the function holding ``line``


class _Log(TorchFunctionMode):
    def __init__(self, ops: list[Op]) -> None:
        super().__init__()
        self.ops = ops

    def __torch_function__(
        self, func: Callable[..., Any], types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
    ) -> Any:
        out = func(*args, **(kwargs or {}))
        if len(self.ops) < 20_000:
            (file, line, source), caller = learner_frames()
            shape = tuple(out.shape) if isinstance(out, torch.Tensor) else ()
            name = op_name(func)
            changed = None
            if "dropout" in name and args and isinstance(args[0], torch.Tensor) and isinstance(out, torch.Tensor):
                changed = not (args[0].shape == out.shape and bool(torch.equal(args[0], out)))
            elif name == "scaled_dot_product_attention":  # its own dropout: on whenever dropout_p > 0
                p = (kwargs or {}).get("dropout_p", args[4] if len(args) > 4 else 0.0)
                changed = isinstance(p, (int, float)) and p > 0
            ignore = (kwargs or {}).get("ignore_index", -100) if name in ("cross_entropy", "nll_loss") else None
            ignore = ignore if isinstance(ignore, int) else None
            zero = _at_zero(name, args, out)
            self.ops.append(Op(name, file, line, source, shape, changed, zero, ignore, caller))
        return out


def _at_zero(name: str, args: tuple[Any, ...], out: Any) -> bool:
    """``arange`` giving ``[0]``, or one row sliced from a table of at least 4 rows that is its row 0."""
    if not isinstance(out, torch.Tensor):
        return False
    if name == "arange":
        return out.numel() == 1 and float(out.reshape(-1)[0]) == 0
    if name != "__getitem__" or not args or not isinstance(args[0], torch.Tensor) or args[0].dim() < 1:
        return False
    table = args[0]
    if table.shape[0] < 4 or out.dim() != table.dim() or out.shape[0] != 1 or out.shape[1:] != table.shape[1:]:
        return False
    return bool(torch.equal(out, table[:1]))


@contextmanager
def op_log(ops: list[Op] | None = None) -> Iterator[list[Op]]:
    """Every torch call made inside (appended to ``ops`` when given), with the learner's line that made it."""
    ops = [] if ops is None else ops
    with _Log(ops):
        yield ops


def at(file: str, line: int, source: str, en: str, zh: str) -> dict[str, Any]:
    """A ``where`` entry, as ``doctor/report/pointers.py`` makes them (the source quoted after "line N")."""
    if source:
        en = en.replace(f"line {line} ", f"line {line} `{source}` ", 1)
        zh = zh.replace(f"第 {line} 行", f"第 {line} 行 `{source}` ", 1)
    return {
        "line": line,
        "file": file,
        "where": f"{os.path.basename(file)}:{line}",
        "source": source,
        "op": "",
        "en": en,
        "zh": zh,
    }


def at_op(op: Op, en: str, zh: str) -> dict[str, Any]:
    return at(op.file, op.line, op.source, en, zh)


def at_caller(op: Op, en: str, zh: str) -> list[dict[str, Any]]:
    """A ``where`` entry at the line that called the function holding ``op`` (``{line}`` in ``en``/``zh`` is its
    number), or nothing when the op has no such caller."""
    if op.caller is None:
        return []
    file, line, source = op.caller
    return [at(file, line, source, en.format(line=line), zh.format(line=line))]


def first_op(ops: list[Op], names: set[str], pred: Callable[[Op], bool] = lambda o: True) -> Op | None:
    return next((o for o in ops if o.op in names and o.line and pred(o)), None)


def raised_at(err: BaseException) -> tuple[str, int, str] | None:
    """The learner's innermost frame of the traceback of ``err`` (or of its cause): (file, line, source)."""
    from anatomy.tracing.recorder import learner_frame

    return learner_frame(err.__cause__ or err)
