"""What the recorder does with one tensor operation: the step, its axis names, its projections (``recorder.py``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import torch
from torch.overrides import TorchFunctionMode

from anatomy.tracing import dims as rd
from anatomy.tracing import steps as r
from anatomy.tracing.projections import argument, bias, projection

Recipe = Callable[[dict[str, torch.Tensor]], torch.Tensor]  # parameters → the value of a parameter-only tensor
Func = Callable[..., Any]  # the torch function an op called
Args = tuple[Any, ...]  # its positional arguments
Kwargs = dict[str, Any]  # its keyword arguments
Tensors = list[torch.Tensor]


def op_name(func: Func) -> str:
    name = getattr(func, "__name__", "") or type(func).__name__
    if name == "__get__":  # a property: Tensor.T, Tensor.mT, Tensor.shape
        name = getattr(getattr(func, "__self__", None), "__name__", name)
    return name


def _tensors(obj: object, out: Tensors) -> Tensors:
    if isinstance(obj, torch.Tensor):
        out.append(obj)
    elif isinstance(obj, (list, tuple)):
        for o in obj:
            _tensors(o, out)
    elif isinstance(obj, dict):
        for o in obj.values():
            _tensors(o, out)
    return out


class Mode(TorchFunctionMode):
    def __init__(self, rec: r.Recording) -> None:
        super().__init__()
        self.rec = rec

    def __torch_function__(
        self,
        func: Func,
        types: Any,
        args: Args = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        if len(self.rec.steps) >= r.MAX_STEPS:  # a forward that loops for long: stop keeping steps, not running
            self.rec.truncated = True
            return func(*args, **kwargs)
        name = op_name(func)
        ins = _tensors(args, []) + _tensors(kwargs, [])
        before = [(t, self.rec.meta_of(t)) for t in ins]
        out = func(*args, **kwargs)
        if name == "__iter__" and args and isinstance(args[0], torch.Tensor):  # q, k, v = qkv: an unbind(0)
            items = tuple(out)
            out, func, name, args, kwargs = iter(items), torch.unbind, "unbind", (args[0], 0), {}
            record_out: object = items
        elif name == "__setitem__" and args and isinstance(args[0], torch.Tensor):  # out[..., i] = head(x)
            record_out = args[0]
        else:
            record_out = out
        try:
            on_op(self.rec, func, name, args, kwargs, before, record_out)
        except Exception as err:  # noqa: BLE001 - never break the learner's forward for the recorder's sake
            self.rec.unfollowed.append(f"{name}: {type(err).__name__}: {err}")
        return out


def _info(rec: r.Recording, t: torch.Tensor, m: r._Meta | None) -> r.TensorInfo:
    if m is None:
        name = rec._param_names.get(id(t))
        return r.TensorInfo(tuple(t.shape), rd.by_size(t.shape, rec.names), f"param {name}" if name else "const")
    src = m.origin if m.producer < 0 else f"step {m.producer}"
    return r.TensorInfo(tuple(t.shape), m.dims, src)


def _param_meta(rec: r.Recording, t: torch.Tensor) -> r._Meta | None:
    """A learner parameter not seen before: a recipe that reads it."""
    name = rec._param_names.get(id(t))
    if name is None:
        return None

    def read(p: dict[str, torch.Tensor], n: str = name) -> torch.Tensor:
        return p[n]

    m = r._Meta(-1, rd.by_size(t.shape, rec.names), False, f"param {name}", recipe=read, params=frozenset({name}))
    rec._metas[id(t)] = (t, m)
    return m


def on_op(rec: r.Recording, func: Func, name: str, args: Args, kwargs: Kwargs, before: r.Metas, out: object) -> None:
    outs = _tensors(out, [])
    if not outs:
        return
    metas = [(t, m if m is not None else _param_meta(rec, t)) for t, m in before]
    data = any(m is not None and m.data for _, m in metas)
    params = frozenset().union(*[m.params for _, m in metas if m is not None and not m.data])
    if not data and not params:
        return  # constants (a causal mask built with torch.ones().tril()) are not steps
    file, line, src = r.learner_frame()
    index = len(rec.steps)
    step = r.Step(
        index,
        name,
        file,
        line,
        src,
        rec._modules[-1] if rec._modules else "",
        [_info(rec, t, m) for t, m in metas],
        [],
        data,
        sorted(params),
    )
    step.feats = [m.feat if m is not None else None for _, m in metas]
    dims = _dims(rec, name, args, kwargs, metas, outs, step)
    feats = _feats(rec, func, name, args, kwargs, metas, outs, step) if data else [None] * len(outs)
    factor = _factor(name, args, metas) if data else 1.0
    recipe = None
    if not data:

        def recipe(
            p: dict[str, torch.Tensor],
            f: Func = func,
            a: Args = args,
            k: Kwargs = kwargs,
            ms: r.Metas = metas,
        ) -> torch.Tensor:
            value: torch.Tensor = _replay(f, a, k, ms, p)
            return value

    for i, t in enumerate(outs):
        m = r._Meta(
            index,
            dims[i] if i < len(dims) else rd.by_size(t.shape, rec.names),
            data,
            f"step {index}",
            recipe=None
            if data
            else (recipe if len(outs) == 1 else cast(Recipe, lambda p, g=recipe, i=i: _tensors(g(p), [])[i])),
            params=frozenset() if data else params,
            feat=feats[i] if i < len(feats) else None,
            factor=factor,
        )
        rec._metas[id(t)] = (t, m)
        step.outputs.append(r.TensorInfo(tuple(t.shape), m.dims, f"step {index}"))
    if data:
        step.value = outs[0].detach().clone()
        if name in r.SOFTMAX_OPS | r.SDPA_OPS:
            first = next((t for t, m in metas if m is not None and m.data), None)
            step.in_value = None if first is None else first.detach().clone()
    rec.steps.append(step)
    if data and name in r.MATMUL_OPS:
        projection(rec, name, args, kwargs, metas, outs[0], step)
    if data and name in ("add", "__add__", "add_", "__iadd__", "__radd__"):
        bias(rec, metas, outs[0], step)


def _replay(func: Func, args: Args, kwargs: Kwargs, metas: r.Metas, params: dict[str, torch.Tensor]) -> Any:
    """Recompute a parameter-only tensor from other parameter values."""
    table = {id(t): m for t, m in metas}

    def sub(a: Any) -> Any:
        if isinstance(a, torch.Tensor):
            m = table.get(id(a))
            return m.recipe(params) if m is not None and m.recipe is not None else a
        if isinstance(a, (list, tuple)):
            return type(a)(sub(x) for x in a)
        return a

    return func(*sub(args), **{k: sub(v) for k, v in kwargs.items()})


def _dims(
    rec: r.Recording, name: str, args: Args, kwargs: Kwargs, metas: r.Metas, outs: Tensors, step: r.Step
) -> list[tuple[str, ...]]:
    names = rec.names
    first_t, first_m = metas[0] if metas else (None, None)
    fd = first_m.dims if first_m is not None else (rd.by_size(first_t.shape, names) if first_t is not None else ())
    o = outs[0]
    if name in r.PERMUTE_OPS and first_t is not None and o.dim() == first_t.dim():
        perm = _perm(name, args, kwargs, first_t.dim())
        if perm is not None:
            return [rd.permute(fd, perm)]
    if name in r.VIEW_OPS and first_t is not None:
        d, note = rd.reshape_dims(tuple(first_t.shape), fd, tuple(o.shape), names)
        step.note = note
        return [d]
    if name in r.MATMUL_OPS:
        step.extra["factors"] = [m.factor if m is not None else 1.0 for _, m in metas]
        if name == "baddbmm":  # baddbmm(input, q, k, beta=0, alpha=scale): the scale is inside the op
            alpha = kwargs.get("alpha", 1)
            step.extra["alpha"] = float(alpha) if isinstance(alpha, (int, float)) else 1.0
        if name == "einsum":
            eq = args[0] if isinstance(args[0], str) else ""
            step.extra["equation"] = eq
            ops = [(tuple(t.shape), m.dims if m is not None else rd.by_size(t.shape, names)) for t, m in metas]
            return [rd.einsum_dims(eq, ops, tuple(o.shape), names)]
        if name == "linear":
            return [(*fd[:-1], names.name(o.shape[-1]))]
        ts = [(t, m) for t, m in metas]
        if name in ("addmm", "baddbmm"):
            ts = ts[1:]
        if len(ts) >= 2:
            (a, am), (b, bm) = ts[0], ts[1]
            ad = am.dims if am is not None else rd.by_size(a.shape, names)
            bd = bm.dims if bm is not None else rd.by_size(b.shape, names)
            d = rd.matmul_dims(ad, bd, tuple(a.shape), tuple(b.shape), tuple(o.shape), names)
            if bm is not None and not bm.data:  # x @ W: the feature axis is named by its size
                d = (*d[:-1], names.name(o.shape[-1]))
            return [d]
    if name in r.SOFTMAX_OPS:
        step.extra["dim"] = argument(args, kwargs, 1, "dim")
    if name in r.SDPA_OPS and len(metas) >= 3:
        return [_sdpa(kwargs, metas, o, step, names)]
    operands = [(tuple(t.shape), m.dims if m is not None else rd.by_size(t.shape, names)) for t, m in metas]
    if name in ("cat", "concat", "concatenate", "stack") or name in ("chunk", "split", "unbind", "tensor_split"):
        return [_align(fd, first_t, t, names) for t in outs]
    if all(tuple(t.shape) == tuple(o.shape) for t in outs) and any(
        len(s) == o.dim() or len(s) <= o.dim() for s, _ in operands
    ):
        same = [op for op in operands if op[0] == tuple(o.shape)]
        if same or name not in r.SHAPE_OPS:
            return [rd.broadcast_dims(tuple(t.shape), same + operands, names) for t in outs]
    return [_align(fd, first_t, t, names) for t in outs]


def _sdpa(kwargs: Kwargs, metas: r.Metas, o: torch.Tensor, step: r.Step, names: rd.SizeNames) -> tuple[str, ...]:
    """``F.scaled_dot_product_attention(q, k, v)``: its scale (``scale=`` or 1/sqrt of q's width, times the
    scalars on q and k) and its output's names (q's rows, v's width)."""
    (q, qm), (_k, km), (v, vm) = metas[:3]
    given = kwargs.get("scale")
    base = float(given) if isinstance(given, (int, float)) else q.shape[-1] ** -0.5
    step.extra["scale"] = base * (qm.factor if qm else 1.0) * (km.factor if km else 1.0)
    rows = qm.dims[:-1] if qm is not None else rd.by_size(q.shape[:-1], names)
    return (*rows, vm.dims[-1] if vm is not None else names.name(o.shape[-1]))


def _align(fd: tuple[str, ...], first_t: torch.Tensor | None, t: torch.Tensor, names: rd.SizeNames) -> tuple[str, ...]:
    """Output axes take the names of input axes of the same size, in order; the rest are named by size."""
    if first_t is None:
        return rd.by_size(t.shape, names)
    out, j = [], 0
    shape = list(first_t.shape)
    for n in t.shape:
        k = next((k for k in range(j, len(shape)) if shape[k] == n), None)
        if k is None or n == 1:
            out.append(names.name(int(n)))
        else:
            out.append(fd[k])
            j = k + 1
    return tuple(out)


def _perm(name: str, args: Args, kwargs: Kwargs, ndim: int) -> list[int] | None:
    order = list(range(ndim))
    if name in ("T", "t"):
        return order[::-1]
    if name == "mT":
        order[-2], order[-1] = order[-1], order[-2]
        return order
    if name in ("transpose", "swapaxes", "swapdims"):
        a, b = argument(args, kwargs, 1, "dim0"), argument(args, kwargs, 2, "dim1")
        if not isinstance(a, int) or not isinstance(b, int):
            return None
        a, b = a % ndim, b % ndim
        order[a], order[b] = order[b], order[a]
        return order
    if name == "permute":
        dims = list(args[1:]) if len(args) > 2 else list(argument(args, kwargs, 1, "dims") or [])
        if len(dims) == 1 and isinstance(dims[0], (list, tuple)):
            dims = list(dims[0])
        return [d % ndim for d in dims] if len(dims) == ndim else None
    if name in ("movedim", "moveaxis"):
        src, dst = argument(args, kwargs, 1, "source"), argument(args, kwargs, 2, "destination")
        if isinstance(src, int) and isinstance(dst, int):
            rest = [i for i in order if i != src % ndim]
            rest.insert(dst % ndim, src % ndim)
            return rest
    return None


def _feats(
    rec: r.Recording, func: Func, name: str, args: Args, kwargs: Kwargs, metas: r.Metas, outs: Tensors, step: r.Step
) -> list[torch.Tensor | None]:
    """Companion feature ids of the outputs (see ``recorder.py``)."""
    with_feat = [(t, m) for t, m in metas if m is not None and m.feat is not None]
    if not with_feat:
        return [None] * len(outs)
    if name == "__setitem__" and len(args) >= 3 and isinstance(args[0], torch.Tensor):
        target, value = args[0], args[2]
        tm = next((m for t, m in metas if t is target), None)
        vm = next((m for t, m in metas if t is value), None) if isinstance(value, torch.Tensor) else None
        feat = (
            tm.feat.clone()
            if tm is not None and tm.feat is not None
            else torch.full(target.shape, -1, dtype=torch.long)
        )
        if vm is not None and vm.feat is not None:
            feat[args[1]] = vm.feat
        return [feat]
    if name in r.SAME_OPS:
        return [
            cast(torch.Tensor, with_feat[0][1].feat).contiguous()
            if tuple(with_feat[0][0].shape) == tuple(outs[0].shape)
            else None
        ]
    if name in r.SHAPE_OPS:
        table = {id(t): m for t, m in metas}

        def sub(a: Any) -> Any:
            if isinstance(a, torch.Tensor):
                m = table.get(id(a))
                if m is not None and m.data:
                    return m.feat if m.feat is not None else torch.full(a.shape, -1, dtype=torch.long)
                return a
            if isinstance(a, (list, tuple)):
                return type(a)(sub(x) for x in a)
            return a

        got = func(*sub(args), **{k: sub(v) for k, v in kwargs.items()})
        return [g.contiguous() for g in _tensors(got, [])]  # a later .view of the data must work on these too
    if name in ("matmul", "__matmul__", "bmm") and len(metas) == 2:
        (a, am), (b, bm) = metas
        if (
            bm is not None
            and bm.data
            and bm.feat is not None
            and a.dim() >= 2
            and b.dim() >= 2
            and (am is None or am.feat is None)
        ):
            col = bm.feat[..., :1, :]  # the weighted sum keeps each value feature in its column
            return [
                col.expand(*outs[0].shape[:-2], outs[0].shape[-2], col.shape[-1]).clone()
                if col.shape[-1] == outs[0].shape[-1]
                else None
            ]
        return [None]
    if name in r.SDPA_OPS:  # the fused kernel's output keeps v's features
        vm = metas[2][1] if len(metas) > 2 else None
        return [vm.feat if vm is not None and vm.feat is not None and vm.feat.shape == outs[0].shape else None]
    if name == "einsum" and len(metas) == 2:
        return [_einsum_feat(args[0], metas, outs[0])]
    if name in r.MATMUL_OPS or name in r.SOFTMAX_OPS:
        return [None]
    same = [m.feat for t, m in with_feat if tuple(t.shape) == tuple(outs[0].shape)]  # elementwise
    if same:
        return [same[0]]
    t, m = with_feat[0]
    try:
        return [cast(torch.Tensor, m.feat).broadcast_to(outs[0].shape).clone()]
    except RuntimeError:
        return [None]


def _einsum_feat(eq: str, metas: r.Metas, out: torch.Tensor) -> torch.Tensor | None:
    """``weights @ v`` written as an einsum: each output element keeps the value feature of its letters."""
    eq = eq.replace(" ", "")
    if "->" not in eq or "..." in eq:
        return None
    ins, res = eq.split("->")
    specs = ins.split(",")
    with_feat = [(spec, m) for spec, (_t, m) in zip(specs, metas) if m is not None and m.feat is not None]
    if len(with_feat) != 1:  # q·k (both carry features) mixes them: no single feature per element
        return None
    for spec, m in with_feat:
        index = tuple(slice(None) if ch in res else 0 for ch in spec)
        kept = [ch for ch in spec if ch in res]
        f = cast(torch.Tensor, m.feat)[index]
        perm = sorted(range(len(kept)), key=lambda i: res.index(kept[i]))
        f = f.permute(perm)
        shape = [f.shape[[kept[p] for p in perm].index(ch)] if ch in kept else 1 for ch in res]
        return f.reshape(shape).expand(out.shape).clone()
    return None


def _factor(name: str, args: Args, metas: r.Metas) -> float:
    """Scalar multiples since the last projection-like op: ``q / sqrt(dk)`` has factor 1/sqrt(dk)."""
    data = [(t, m) for t, m in metas if m is not None and m.data]
    base = data[0][1].factor if data else 1.0
    if name in r.SHAPE_OPS or name in r.SAME_OPS:
        return base
    if name in r.SCALE_OPS and len(data) == 1:
        others = [a for a in args if not (isinstance(a, torch.Tensor) and a is data[0][0])]
        vals = [r.scalar_value(a) for a in others]
        scal = [s for s in vals if s is not None]
        if len(scal) == 1 and scal[0] != 0:
            first_is_data = isinstance(args[0], torch.Tensor) and args[0] is data[0][0]
            if name in ("div", "div_", "__truediv__", "true_divide", "divide", "__itruediv__"):
                return base / scal[0] if first_is_data else 1.0
            return base * scal[0]
    return 1.0
