"""The parts of a whole model's recorded forward: which steps run inside which block (``find_blocks`` and the
hooks of ``BlockSpans``), what each step outside the blocks is (token embedding, position table, where positions
enter, the final norm, the head, the loss and its shift), and the block rows' labels from each block recorded on
its own (the learner trace's ``label_steps``). Read by ``model_trace.py``."""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.overrides import _get_current_function_mode_stack

from anatomy.doctor.trace.learner_labels import NORM_OPS, Row
from anatomy.tracing import ops as recorder_ops
from anatomy.tracing import steps as r

ELEMENTWISE = {"add", "__add__", "__radd__", "add_", "__iadd__", "mul", "__mul__", "__rmul__", "mul_", "sub"}
SLICES = {"__getitem__", "narrow", "select", "roll"}
FLATTENS = r.VIEW_OPS | {"contiguous"}
LOSSES = {"cross_entropy", "nll_loss", "log_softmax", "softmax", "gather", "mean", "sum", "binary_cross_entropy"}


@dataclass
class ModelRow(Row):
    """A row of the model's table: the learner trace's :class:`Row`, plus the part of the model it belongs to."""

    part: str = ""  # "embed", "block", "final", "loss"
    label: str = ""  # the model-level step: tok, pos, pos_in, scale, final_norm, head, tied_head, loss, shift, flat
    detail: str = ""  # e.g. "×4.47 (√D)" for a scale
    layers: list[int] = field(default_factory=list)  # block rows: the layers this row stands for


def find_blocks(model: nn.Module, n_layers: int) -> tuple[str, list[tuple[str, nn.Module]]]:
    """The stack: the ``ModuleList``/``Sequential``/``ModuleDict`` whose children hold sub-modules (blocks, not a
    Linear or an activation), preferring one of ``n_layers`` such children, then the one with the most parameters.
    ``("", [])`` when the model has none."""
    best: tuple[tuple[bool, int, int], str, list[tuple[str, nn.Module]]] | None = None
    for path, m in model.named_modules():
        if not isinstance(m, (nn.ModuleList, nn.Sequential, nn.ModuleDict)):
            continue
        kids = [(f"{path}.{n}" if path else n, k) for n, k in m.named_children() if any(True for _ in k.children())]
        if len(kids) < 2:
            continue
        size = sum(p.numel() for _n, k in kids for p in k.parameters())
        key = (len(kids) == n_layers, size, -path.count("."))
        if best is None or key > best[0]:
            best = (key, path, kids)
    return ("", []) if best is None else (best[1], best[2])


def active_recording() -> r.Recording | None:
    """The recording the recorder's mode is filling now (read from torch's mode stack inside a module hook)."""
    for mode in _get_current_function_mode_stack():  # type: ignore[no-untyped-call]
        if isinstance(mode, recorder_ops.Mode):
            return mode.rec
    return None


@dataclass
class Call:
    """One call of a block: its index in the stack, its path, and the recorded steps it ran ``[start, end)``."""

    layer: int
    path: str
    start: int
    end: int = -1
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)


class BlockSpans:
    """Hooks on the blocks: each call's step span while recording, or its inputs (cloned) on a plain run."""

    def __init__(self, blocks: list[tuple[str, nn.Module]], keep_inputs: bool) -> None:
        self.calls: list[Call] = []
        self.keep = keep_inputs
        self.handles: list[Any] = []
        for i, (path, m) in enumerate(blocks):
            self.handles.append(m.register_forward_pre_hook(self._enter(i, path), with_kwargs=True))
            self.handles.append(m.register_forward_hook(self._leave, always_call=True))

    def _enter(self, i: int, path: str) -> Any:
        def hook(_m: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            rec = active_recording()
            call = Call(i, path, len(rec.steps) if rec is not None else 0)
            if self.keep:
                call.args = tuple(a.detach().clone() if isinstance(a, torch.Tensor) else a for a in args)
                call.kwargs = {k: v.detach().clone() if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
            self.calls.append(call)

        return hook

    def _leave(self, _m: nn.Module, _a: Any, _o: Any) -> None:
        rec = active_recording()
        open_calls = [c for c in self.calls if c.end < 0]
        if open_calls:
            open_calls[-1].end = len(rec.steps) if rec is not None else 0

    def remove(self) -> None:
        for h in self.handles:
            h.remove()


def align_labels(
    model_steps: list[r.Step], block_steps: list[r.Step], labels: dict[int, tuple[str, str]]
) -> tuple[dict[int, tuple[str, str]], dict[int, int]]:
    """The labels of a block recorded on its own, carried to the same steps of the model's recording (matched by
    op and output shape, in order): ``{model step: (kind, role)}`` and ``{block step: model step}`` (indices)."""
    a = [(s.op, s.outputs[0].shape) for s in model_steps]  # not the line: torch's own layers have none of theirs
    b = [(s.op, s.outputs[0].shape) for s in block_steps]
    out: dict[int, tuple[str, str]] = {}
    where: dict[int, int] = {}
    for block in difflib.SequenceMatcher(None, a, b, autojunk=False).get_matching_blocks():
        for k in range(block.size):
            ms, bs = model_steps[block.a + k], block_steps[block.b + k]
            where[bs.index] = ms.index
            if bs.index in labels:
                out[ms.index] = labels[bs.index]
    return out, where


def _scale(step: r.Step, rec: r.Recording, d: int) -> str:
    """``×4.47 (√D)``: the factor a scalar multiplication applied, from the values before and after."""
    src = rec.producer(step)
    if src is None or step.value is None or src.value is None or src.value.shape != step.value.shape:
        return ""
    base = src.value.double()
    nz = base.abs() > 1e-12
    if not bool(nz.any()):
        return ""
    ratio = float((step.value.double()[nz] / base[nz]).median())
    named = " (√D)" if abs(ratio - d**0.5) < 1e-6 * d else " (1/√D)" if abs(ratio * d**0.5 - 1) < 1e-6 else ""
    return f"×{ratio:.3g}{named}"


def _positional(info: r.TensorInfo) -> bool:
    """A tensor that does not depend on the ids and has one axis of length T: positions (not a (T, T) mask)."""
    return info.source != "x" and not info.source.startswith("step") and info.dims.count("T") == 1


def position_enters(step: r.Step, rec: r.Recording, data: set[int]) -> bool:
    """An elementwise step that mixes the data with something made from positions alone (a position table, the
    sines and cosines of a rotary encoding)."""
    if step.op not in ELEMENTWISE:
        return False
    for i, info in enumerate(step.inputs):
        src = rec.producer(step, i)
        if src is None and _positional(info) and info.source not in ("ids", "targets"):
            return True
        if src is not None and src.index not in data and src.outputs[0].dims.count("T") == 1:
            return True
    return False


def label_outside(rec: r.Recording, steps: list[r.Step], part: str, vocab: int, d: int) -> dict[int, tuple[str, str]]:
    """``{step index: (label, detail)}`` for the steps outside the blocks."""
    data = {s.index for s in rec.steps if s.data}
    out: dict[int, tuple[str, str]] = {}
    tok_params = {p for s in rec.steps if s.op == "embedding" and s.data for p in s.params}
    for s in steps:
        sources = {i.source for i in s.inputs}
        if s.op == "embedding" and s.data:  # looked up by the ids (a position table is looked up by positions)
            out[s.index] = ("tok", "")
        elif not s.data:
            out[s.index] = ("pos", "")
        elif position_enters(s, rec, data):  # after the blocks too: positions added too late show there
            out[s.index] = ("pos_in", "")
        elif s.op in SLICES and ("targets" in sources or part == "loss"):
            out[s.index] = ("shift", "")
        elif s.op in r.SCALE_OPS and part == "embed" and all(i.shape == () for i in s.inputs[1:]):
            out[s.index] = ("scale", _scale(s, rec, d))
    head = next(
        (s for s in steps if part != "embed" and s.data and s.op in r.MATMUL_OPS and s.outputs[0].shape[-1] == vocab),
        None,
    )
    if head is not None:
        out[head.index] = ("tied_head" if set(head.params) & tok_params else "head", "")
    for s in steps:
        if s.index in out or part == "embed":
            continue
        after = head is not None and s.index > head.index
        if not after and (s.op in NORM_OPS or "norm" in rec.module_types.get(s.module, "").lower()):
            out[s.index] = ("final_norm", "")
        elif after and s.op in LOSSES:
            out[s.index] = ("loss", "")
        elif after and s.op in SLICES:
            out[s.index] = ("shift", "")
        elif after and s.op in FLATTENS:
            out[s.index] = ("flat", "")
    return out


def mark_hand_norms(rec: r.Recording, steps: list[r.Step], out: dict[int, tuple[str, str]]) -> None:
    """A hand-written final norm (a class whose name says norm): only its last step keeps the label."""
    normed = [s for s in steps if out.get(s.index, ("",))[0] == "final_norm" and s.op not in NORM_OPS]
    for a, b in zip(normed, normed[1:]):
        if a.module == b.module:
            out.pop(a.index, None)
