"""The projections the recorder finds (``ops.on_op`` calls these): a matmul of data with a parameter-only
tensor records its matrix, and an add of a parameter-only vector right after one records its bias."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import torch

from anatomy.tracing import steps as r

Params = dict[str, torch.Tensor]  # the learner's parameters by name
Recipe = Callable[[Params], torch.Tensor]  # parameters → the value of a parameter-only tensor


def argument(args: tuple[Any, ...], kwargs: dict[str, Any], i: int, key: str, default: Any = None) -> Any:
    if key in kwargs:
        return kwargs[key]
    return args[i] if len(args) > i else default


def projection(
    rec: r.Recording,
    name: str,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    metas: r.Metas,
    out: torch.Tensor,
    step: r.Step,
) -> None:
    """A matmul of data with a parameter-only tensor is a projection: record its matrix ``(n_features, in)``."""
    data = [(t, m) for t, m in metas if m is not None and m.data]
    weights = [(t, m) for t, m in metas if m is not None and not m.data and m.recipe is not None]
    if len(data) != 1 or not weights:
        return
    x, xm = data[0]
    index = len(rec.projections)
    bias = bias_param = None
    owner = weights[0][1]  # the matrix's meta (addmm/baddbmm: the last parameter-only operand, after the bias)
    if name == "linear":
        w, wm = weights[0]
        if w.dim() != 2:
            return
        matrix, n_feat, n_in = cast(Recipe, wm.recipe), w.shape[0], w.shape[1]
        feat = torch.arange(n_feat).expand(out.shape).clone()
        b = argument(args, kwargs, 2, "bias")
        if isinstance(b, torch.Tensor):
            bm = next((m for t, m in metas if t is b), None)
            if bm is not None and bm.recipe is not None:
                bias, bias_param = bm.recipe, next(iter(bm.params), None)
    elif name == "einsum":
        got = _einsum_projection(args[0], metas, x, weights[0], out)
        if got is None:
            return
        matrix, n_feat, n_in, feat = got
    else:
        w, wm = weights[-1]
        owner = wm
        ts = [t for t, _ in metas]
        if name in ("addmm", "baddbmm"):
            ts = ts[1:]
            bt, bm = metas[0]
            if bm is not None and bm.recipe is not None and not bm.data:
                bias, bias_param = bm.recipe, next(iter(bm.params), None)
        if len(ts) < 2 or ts[1] is not w or w.dim() < 2:
            return  # W @ x (the parameter first) is not read as a projection
        n_in, cols = w.shape[-2], w.shape[-1]
        lead = tuple(w.shape[:-2])
        n_feat = cols * (int(torch.tensor(lead).prod()) if lead else 1)

        weight_recipe = cast(Recipe, wm.recipe)  # a weight: kept only with a recipe

        def matrix(p: Params, g: Recipe = weight_recipe, n: int = n_in) -> torch.Tensor:
            return g(p).movedim(-2, -1).reshape(-1, n)

        ids = torch.arange(n_feat).view(*lead, 1, cols)
        try:
            feat = ids.expand(out.shape).clone()
        except RuntimeError:
            return
    proj = r.Projection(
        index,
        step.index,
        next(iter(sorted(owner.params)), "?"),
        matrix,
        int(n_feat),
        int(n_in),
        bias,
        bias_param,
        step.module,
        xm.origin if xm.producer < 0 else f"step {xm.producer}",
    )
    rec.projections.append(proj)
    m = rec.meta_of(out)
    if m is not None:
        m.feat = feat + index * r.FEATURE_STRIDE
        m.factor = 1.0


def _einsum_projection(
    eq: object, metas: r.Metas, x: torch.Tensor, weight: tuple[torch.Tensor, r._Meta], out: torch.Tensor
) -> tuple[Recipe, int, int, torch.Tensor] | None:
    eq = eq.replace(" ", "") if isinstance(eq, str) else ""
    if "->" not in eq or "..." in eq:
        return None
    ins, res = eq.split("->")
    specs = ins.split(",")
    tensors = [t for t, _ in metas]
    if len(specs) != 2 or len(tensors) != 2:
        return None
    xi = 0 if tensors[0] is x else 1
    xs, ws = specs[xi], specs[1 - xi]
    w, wm = weight
    contracted = [ch for ch in ws if ch in xs and ch not in res]
    if len(contracted) != 1 or any(ch not in res for ch in ws if ch != contracted[0]):
        return None
    c = ws.index(contracted[0])
    keep = [i for i in range(len(ws)) if i != c]
    n_in = w.shape[c]
    n_feat = int(torch.tensor([w.shape[i] for i in keep]).prod()) if keep else 1

    weight_recipe = cast(Recipe, wm.recipe)  # a weight: kept only with a recipe

    def matrix(p: Params, g: Recipe = weight_recipe, order: list[int] = keep + [c], n: int = n_in) -> torch.Tensor:
        return g(p).permute(order).reshape(-1, n)

    ids = torch.arange(n_feat).view(*[w.shape[i] for i in keep]) if keep else torch.zeros((), dtype=torch.long)
    kept = [ws[i] for i in keep]
    perm = sorted(range(len(kept)), key=lambda i: res.index(kept[i]))
    ids = ids.permute(perm) if kept else ids
    shape = [w.shape[keep[[kept[p] for p in perm].index(ch)]] if ch in kept else 1 for ch in res]
    return matrix, n_feat, n_in, ids.reshape(shape).expand(out.shape).clone()


def bias(rec: r.Recording, metas: r.Metas, out: torch.Tensor, step: r.Step) -> None:
    """``y + b`` right after a projection (a bare-Parameter bias): the projection's bias, element by element."""
    data = [(t, m) for t, m in metas if m is not None and m.data]
    params = [(t, m) for t, m in metas if m is not None and not m.data and m.recipe is not None]
    if len(data) != 1 or len(params) != 1 or data[0][1].feat is None:
        return
    t, m = data[0]
    src = rec.steps[m.producer] if m.producer >= 0 else None
    proj = next((p for p in rec.projections if src is not None and p.step == src.index), None)
    if proj is None or proj.bias is not None:
        return
    local = (cast(torch.Tensor, m.feat) - proj.index * r.FEATURE_STRIDE).reshape(-1)
    pos = torch.full((proj.n_features,), -1, dtype=torch.long)
    flat = torch.arange(local.numel())
    pos.scatter_reduce_(0, local, flat, reduce="amin", include_self=False)
    if bool((pos < 0).any()):
        return
    shape = tuple(out.shape)
    recipe = params[0][1].recipe
    proj.bias = lambda p, g=recipe, s=shape, i=pos: g(p).broadcast_to(s).reshape(-1)[i]
    proj.bias_param = next(iter(params[0][1].params), None)
