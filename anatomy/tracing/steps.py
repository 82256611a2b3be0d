"""The recorder's data: a :class:`Recording` of :class:`Step` s, the tensors' :class:`TensorInfo`, the
projections found, the op families, and the learner's frame of each op (``recorder.py`` runs the forward,
``ops.py`` turns each call into a step; both import this module, which imports neither)."""

from __future__ import annotations

import linecache
import math
import os
import sys
import sysconfig
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

import torch

from anatomy.tracing import dims as rd

# All different, and so are their products; none is 2 or 3, the constants of rotate-half and of a fused q|k|v.
PROBE_SIZES = {"B": 2, "T": 7, "H": 5, "Dh": 4, "D": 20}
FEATURE_STRIDE = 1 << 20  # global feature id = projection index * FEATURE_STRIDE + feature
MAX_STEPS = 20_000  # a forward stuck in a loop must not fill the memory while its time limit runs

SHAPE_OPS = {
    "view",
    "reshape",
    "transpose",
    "permute",
    "swapaxes",
    "swapdims",
    "T",
    "mT",
    "t",
    "flatten",
    "unflatten",
    "view_as",
    "reshape_as",
    "squeeze",
    "unsqueeze",
    "expand",
    "expand_as",
    "repeat",
    "chunk",
    "split",
    "tensor_split",
    "unbind",
    "__getitem__",
    "narrow",
    "select",
    "movedim",
    "moveaxis",
    "repeat_interleave",
    "cat",
    "concat",
    "concatenate",
    "stack",
    "flip",
    "roll",
    "rearrange",
}
SAME_OPS = {
    "contiguous",
    "clone",
    "detach",
    "to",
    "float",
    "double",
    "half",
    "type_as",
    "type",
    "dropout",
    "requires_grad_",
}
PERMUTE_OPS = {"transpose", "permute", "swapaxes", "swapdims", "T", "mT", "t", "movedim", "moveaxis"}
VIEW_OPS = {"view", "reshape", "flatten", "unflatten", "view_as", "reshape_as"}
MATMUL_OPS = {"matmul", "__matmul__", "__rmatmul__", "bmm", "mm", "einsum", "linear", "addmm", "baddbmm"}
SCALE_OPS = {
    "mul",
    "mul_",
    "__mul__",
    "__rmul__",
    "multiply",
    "div",
    "div_",
    "__truediv__",
    "true_divide",
    "divide",
    "__itruediv__",
    "__imul__",
}
SOFTMAX_OPS = {"softmax", "log_softmax", "_softmax"}
SDPA_OPS = {"scaled_dot_product_attention"}

TRANSPARENT = "__anatomy_transparent__"  # a module setting this global True is never the learner's line
_SKIP = tuple(
    p + os.sep
    for p in {
        os.path.dirname(torch.__file__),
        os.path.dirname(__file__),
        os.path.join(os.path.dirname(os.path.dirname(__file__)), "cli"),
        os.path.join(os.path.dirname(os.path.dirname(__file__)), "doctor"),  # its own call of the forward
        sysconfig.get_paths()["stdlib"],
        os.path.dirname(os.__file__),
    }
    if p
)


@dataclass
class TensorInfo:
    shape: tuple[int, ...]
    dims: tuple[str, ...]
    source: str  # "x" (an input), "step 4", "param heads.0.query.weight", "const"

    def to_dict(self) -> dict[str, Any]:
        return {"shape": list(self.shape), "dims": rd.letters(self.dims), "source": self.source}


@dataclass
class Step:
    index: int
    op: str
    file: str
    line: int
    source: str  # the learner's line of code, stripped
    module: str  # innermost module path running ("" the root, "heads.0.query")
    inputs: list[TensorInfo]
    outputs: list[TensorInfo]
    data: bool  # depends on the probe inputs (False: parameter or constant arithmetic)
    params: list[str] = field(default_factory=list)  # learner parameters used (directly or through W.T, W.view)
    note: str = ""  # a view that moves numbers between axes
    extra: dict[str, Any] = field(default_factory=dict)  # dim of a softmax, an einsum's equation, scalar factors
    value: torch.Tensor | None = field(default=None, repr=False)  # the first output, as it was then
    in_value: torch.Tensor | None = field(default=None, repr=False)  # the first data input (softmax steps)
    feats: list[torch.Tensor | None] = field(
        default_factory=list, repr=False
    )  # each input's feature companion then (None: none)

    @property
    def where(self) -> str:
        return f"{os.path.basename(self.file)}:{self.line}" if self.line else "?"

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "op": self.op,
            "file": self.file,
            "line": self.line,
            "source": self.source,
            "module": self.module,
            "inputs": [t.to_dict() for t in self.inputs],
            "outputs": [t.to_dict() for t in self.outputs],
            "data": self.data,
            "params": self.params,
            "note": self.note,
            **({"extra": self.extra} if self.extra else {}),
        }


@dataclass
class Projection:
    """A linear map applied to data: ``features = M @ input (+ bias)``; ``M`` is ``(n_features, in)``."""

    index: int
    step: int
    weight: str  # the learner's parameter
    matrix: Callable[[dict[str, torch.Tensor]], torch.Tensor] = field(repr=False)  # params → (n_features, in)
    n_features: int
    n_in: int
    bias: Callable[[dict[str, torch.Tensor]], torch.Tensor] | None = field(
        default=None, repr=False
    )  # params → (n_features,)
    bias_param: str | None = None
    module: str = ""
    applied_to: str = ""  # the source of its data input ("x", "step 12")


@dataclass
class _Meta:
    producer: int  # step index (-1: an input)
    dims: tuple[str, ...]
    data: bool
    origin: str
    recipe: Callable[[dict[str, torch.Tensor]], torch.Tensor] | None = None  # parameter-only tensors: params → value
    params: frozenset[str] = frozenset()
    feat: torch.Tensor | None = None  # long, same shape: global feature id of each element (-1 none)
    factor: float = 1.0  # scalar multiples applied since the last non-scalar op


# each tensor input of an op, with what the recorder knows of it (None: a tensor it has not seen)
Metas = list[tuple[torch.Tensor, _Meta | None]]


class RecordError(RuntimeError):
    """The forward raised while being recorded (``.error`` is the learner's exception)."""

    def __init__(self, message: str, error: BaseException | None = None):
        super().__init__(message)
        self.error = error


class Recording:
    def __init__(self, sizes: dict[str, int]):
        self.sizes = dict(sizes)
        self.names = rd.SizeNames(sizes)
        self.steps: list[Step] = []
        self.projections: list[Projection] = []
        self.unfollowed: list[str] = []  # ops the recorder saw but could not read (why)
        self.truncated = False  # more than MAX_STEPS operations: the rest ran unrecorded
        self.output = None
        self._metas: dict[int, tuple[torch.Tensor, _Meta]] = {}
        self._param_names: dict[int, str] = {}
        self._modules: list[str] = []
        self.module_types: dict[str, str] = {}  # module path → class name (of the module recorded)

    def _leave(self) -> None:
        if self._modules:
            self._modules.pop()

    # --- queries ------------------------------------------------------------------------------------------------
    def data_steps(self) -> list[Step]:
        return [s for s in self.steps if s.data]

    def find(self, *ops: str) -> list[Step]:
        return [s for s in self.steps if s.op in ops and s.data]

    def find_softmax(self) -> Step | None:
        """The first softmax (or fused ``scaled_dot_product_attention``) applied to data."""
        found = self.find(*SOFTMAX_OPS, *SDPA_OPS)
        return found[0] if found else None

    def producer(self, step: Step, which: int = 0) -> Step | None:
        """The step that made input ``which`` of ``step`` (None: an input, a parameter or a constant)."""
        if which >= len(step.inputs):
            return None
        src = step.inputs[which].source
        return self.steps[int(src.split()[1])] if src.startswith("step ") else None

    def meta_of(self, t: torch.Tensor) -> _Meta | None:
        got = self._metas.get(id(t))
        return got[1] if got is not None and got[0] is t else None

    def projection_of(self, feat: torch.Tensor | None) -> list[Projection]:
        """The projections whose features a companion tensor holds."""
        if feat is None:
            return []
        ids = sorted({int(i) // FEATURE_STRIDE for i in feat.unique().tolist() if i >= 0})  # type: ignore[no-untyped-call]
        return [self.projections[i] for i in ids]

    def to_dict(self) -> dict[str, Any]:
        return {
            "sizes": self.sizes,
            "steps": [s.to_dict() for s in self.steps],
            "projections": [
                {
                    "index": p.index,
                    "step": p.step,
                    "weight": p.weight,
                    "bias": p.bias_param,
                    "features": p.n_features,
                    "in": p.n_in,
                    "module": p.module,
                    "applied_to": p.applied_to,
                }
                for p in self.projections
            ],
            "unfollowed": self.unfollowed,
            "truncated": self.truncated,
        }


def sizes_for(d_model: int, n_heads: int, batch: int, seq: int, **more: int) -> dict[str, int]:
    """The named sizes of a probe ``(B, T, D)`` for a module built with ``(d_model, n_heads)``."""
    return {"B": batch, "T": seq, "H": n_heads, "Dh": d_model // n_heads, "D": d_model, **more}


def call_learner(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)``: the doctor's and the trace's call of the learner's module. The frames outside it are
    whoever called the doctor (the ``anatomy`` script, a notebook cell, a test), never the learner's line: the walks
    below stop here. A model from an installed package (transformers) then has no learner line at all."""
    return fn(*args, **kwargs)


_BOUNDARY = call_learner.__code__


def learner_frame() -> tuple[str, int, str]:
    """The innermost frame outside torch, the standard library and the doctor, inside the doctor's call of the
    learner's module: (file, line, source); empty when there is none."""
    f: FrameType | None = sys._getframe(1)
    while f is not None and f.f_code is not _BOUNDARY:
        if _is_learner(f):
            return _frame(f)
        f = f.f_back
    return "", 0, ""


Frame = tuple[str, int, str]  # (file, line, source)


def _is_learner(f: FrameType) -> bool:
    fn = f.f_code.co_filename
    return not fn.startswith(_SKIP) and not fn.startswith("<frozen") and not f.f_globals.get(TRANSPARENT)


def learner_frames() -> tuple[Frame, Frame | None]:
    """The innermost learner frame (as :func:`learner_frame`) and the learner's frame that called it, when that is
    in the same file and says more: the caller of a helper (``create_position_ids(...)`` called from the model), or
    the forward that calls a submodule's forward (``x = self.embed[0](tgt)``); not the code that called the model's
    own forward. Frames between the two that are torch's (``Module.__call__``) are passed over."""
    f: FrameType | None = sys._getframe(1)
    while f is not None and f.f_code is not _BOUNDARY and not _is_learner(f):
        f = f.f_back
    if f is None or f.f_code is _BOUNDARY:
        return ("", 0, ""), None
    inner = f
    f = f.f_back
    while f is not None and f.f_code is not _BOUNDARY and not _is_learner(f):
        f = f.f_back
    if (
        f is None
        or f.f_code is _BOUNDARY
        or f.f_code.co_filename != inner.f_code.co_filename
        or (inner.f_code.co_name == "forward" and f.f_code.co_name != "forward")
    ):
        return _frame(inner), None
    return _frame(inner), _frame(f)


def _frame(f: FrameType) -> Frame:
    return f.f_code.co_filename, f.f_lineno, linecache.getline(f.f_code.co_filename, f.f_lineno).strip()


def scalar_value(a: object) -> float | None:
    """A Python number, or a one-element tensor that does not depend on the data."""
    if isinstance(a, bool):
        return None
    if isinstance(a, (int, float)):
        return float(a)
    if (
        isinstance(a, torch.Tensor)
        and a.numel() == 1
        and a.dtype.is_floating_point
        or (isinstance(a, torch.Tensor) and a.numel() == 1 and not a.dtype.is_complex and a.dtype != torch.bool)
    ):
        v = float(a.detach().reshape(()))
        return v if math.isfinite(v) else None
    return None
