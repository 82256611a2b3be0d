"""The op-level recorder: every tensor operation of a learner's forward, with the learner's own file and line.

    rec = record(module, x, sizes={"B": 2, "T": 7, "H": 5, "Dh": 4, "D": 20})
    for s in rec.steps:
        print(s.line, s.source, s.op, s.outputs[0].dims)    # 23 q = q.view(b, t, h, dk) view ('B', 'T', 'H', 'Dh')
    rec.find_softmax()                                      # the first softmax step (or None)
    rec.projections                                         # every linear map applied to the data

**How.** A ``TorchFunctionMode`` sees every call of a torch function or ``Tensor`` method made while the
forward runs (``F.linear`` from inside ``nn.Linear``, ``x @ W``, ``.view``, ``.T``, ``softmax``, ``einsum``...).
Calls made *inside* such a call are not seen (``F.layer_norm`` is one step), so a step is what the learner wrote.
Each step takes the innermost frame that is not torch's, the standard library's or the doctor's: the learner's
file and line, even when the op runs inside ``nn.Linear.forward``. Every tensor carries a small record: which
step made it, names for its axes (``dims.py``), whether it depends on the inputs (*data*) or only on
parameters (``self.W.T`` is a recipe replayed on any parameter values), and, downstream of a projection, which of
the projection's output features each element holds (a ``long`` companion tensor moved through every view,
transpose, chunk and index exactly as the data is). That is how ``q``, ``k`` and ``v`` are traced back to the rows
of a weight, whatever the container: a ``ModuleList`` of heads, a fused ``qkv`` Linear, bare Parameters in an
einsum. A lazy module (``nn.LazyLinear``) gets one warm-up forward first.

What it cannot follow: code outside torch (numpy), ops fused into one call (``nn.MultiheadAttention`` is the single
step ``multi_head_attention_forward``), and Python control flow (only the path taken is recorded).
"""

from __future__ import annotations

import linecache
import os
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from anatomy.tracing import dims as rd
from anatomy.tracing import ops as recorder_ops
from anatomy.tracing.steps import (
    _BOUNDARY,
    _SKIP,
    PROBE_SIZES,
    TRANSPARENT,
    RecordError,
    Recording,
    _Meta,
    call_learner,
)


def record(
    target: Callable[..., Any],
    *inputs: Any,
    sizes: dict[str, int] | None = None,
    dims: list[str] | None = None,
    names: list[str] | None = None,
    kwargs: dict[str, Any] | None = None,
    module: nn.Module | None = None,
    tag_kwargs: bool = True,
) -> Recording:
    """Run ``target(*inputs, **kwargs)`` (a module or a function) once and record every tensor operation.

    ``sizes``: the probe's named sizes (default :data:`PROBE_SIZES`); ``dims``: the legend letters of each input
    (``["B T D"]``; default: named by size); ``names``: what to call the inputs (default ``x``, ``x1``...).
    Inputs beyond ``names`` are constants (a mask), and so are ``kwargs`` with ``tag_kwargs=False``.
    ``module``: when ``target`` is a function that calls a module (``subject.run``), the module whose parameters
    and sub-modules to name. Raises :class:`RecordError` when the forward raises (the learner's error inside)."""
    rec = Recording(sizes or PROBE_SIZES)
    kwargs = dict(kwargs or {})
    module = target if isinstance(target, nn.Module) else module
    if module is not None and any(isinstance(p, nn.parameter.UninitializedParameter) for p in module.parameters()):
        with torch.no_grad():
            target(*inputs, **kwargs)  # nn.LazyLinear and friends take their shapes from a first forward
    if module is not None:
        rec.module_types = {p: type(m).__name__ for p, m in module.named_modules()}
        rec._param_names = {id(p): n for n, p in module.named_parameters()}
        rec._param_names.update({id(b): n for n, b in module.named_buffers()})
    names = list(names or ["x" if i == 0 else f"x{i}" for i in range(len(inputs))])
    tagged = list(zip(names, inputs)) + (list(kwargs.items()) if tag_kwargs else [])
    for i, (n, t) in enumerate(tagged):
        if isinstance(t, torch.Tensor):
            d = rd.parse(dims[i]) if dims and i < len(dims) and dims[i] else rd.by_size(t.shape, rec.names)
            rec._metas[id(t)] = (t, _Meta(-1, d, True, n))
    handles = []
    if module is not None:
        for path, m in module.named_modules():
            handles.append(m.register_forward_pre_hook(lambda _m, _a, p=path: rec._modules.append(p)))
            handles.append(m.register_forward_hook(lambda _m, _a, _o: rec._leave(), always_call=True))
    mode = recorder_ops.Mode(rec)
    try:
        with torch.no_grad(), mode:
            rec.output = call_learner(target, *inputs, **kwargs)
    except (Exception, SystemExit) as err:  # noqa: BLE001 - the learner's forward raised (even sys.exit): say where
        raise RecordError(
            f"the forward raised {type(err).__name__}: {' '.join(str(err).split())[:200]}{_raised_at(err)}", err
        ) from None
    finally:
        for h in handles:
            h.remove()
    return rec


def learner_frame(err: BaseException) -> tuple[str, int, str] | None:
    """The learner's innermost frame of ``err``'s traceback (not torch's, not ours): (file, line, source)."""
    tb, found = err.__traceback__, None
    while tb is not None:
        if tb.tb_frame.f_code is _BOUNDARY:  # the frames so far called the doctor: not the learner's
            found = None
        fn = tb.tb_frame.f_code.co_filename
        if not fn.startswith(_SKIP) and not fn.startswith("<") and not tb.tb_frame.f_globals.get(TRANSPARENT):
            found = (fn, tb.tb_lineno)
        tb = tb.tb_next
    if found is None:
        return None
    return found[0], found[1], linecache.getline(found[0], found[1]).strip()


def _raised_at(err: BaseException) -> str:
    """`` (at line 12 of my.py: `x.view(5, -1)`)``: the learner's innermost frame of the traceback."""
    frame = learner_frame(err)
    if frame is None:
        return ""
    return f" (at line {frame[1]} of {os.path.basename(frame[0])}: `{frame[2]}`)"
