"""``patching(model, edits)``: run forwards with activations changed at named hook points, scoped like ``capture()``.

    with patching(model, {"stack.blocks.0.attn.hook_z": ablate_head(3)}):      # head 3 of layer 0 says nothing
        ablated = model(ids).logits

    with capture(model, "stack.blocks.2.hook_resid_post") as clean:             # activation patching:
        model(clean_ids)                                                        # cache a run ...
    edit = patch_from(clean, index=(slice(None), 4))                            # ... and put its position 4
    with patching(model, {"stack.blocks.2.hook_resid_post": edit}):            # into another run
        patched = model(corrupted_ids).logits

``edits`` maps hook-point names (or shell-style patterns, as for ``capture()``) to an edit or a list of edits,
applied in order. An edit is any callable ``edit(activation, name) -> tensor`` returning a tensor of the same shape
(or ``None``: keep it); it must not change its argument in place. Built in: :func:`zero`, :func:`scale`,
:func:`replace`, :func:`ablate_head` (heads are dim 1 of ``hook_q/k/v/scores/weights/z``) and :func:`patch_from`
(a value cached from another run). ``index`` limits an edit to ``activation[index]`` (``(slice(None), 4)``: token 4
of a ``(B, T, D)`` residual; ``(slice(None), 3)``: head 3 of a ``(B, H, T, Dh)`` tensor).

Every forward inside the block is edited (several calls, ``generate``, each decoding step), and the hooks are
removed when the block exits, also when the forward raises. The block yields a dict counting, per hook name, the
calls that were edited. A ``capture()`` entered *inside* the block records the edited values; one entered before
it records the values as they were. Asking for a score or weight hook makes ``kernel="auto"`` attention use the
math kernel for that layer, as ``capture()`` does. The edits never store anything on a module. This is the idea of
TransformerLens's ``run_with_hooks``, written for this library's hook names.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

from anatomy.inspection.capture import select_hooks

Edit = Callable[[torch.Tensor, str], "torch.Tensor | None"]
Index = Any  # anything a tensor accepts in ``x[index]``: an int, a slice, a tuple of them, a mask


def _put(x: torch.Tensor, index: Index, value: torch.Tensor | float) -> torch.Tensor:
    """A copy of ``x`` with ``x[index] = value`` (the whole tensor when ``index`` is None)."""
    out = x.clone()
    if index is None:
        out.copy_(torch.as_tensor(value, dtype=x.dtype, device=x.device).expand_as(x))
    else:
        out[index] = value
    return out


def zero(index: Index = None) -> Edit:
    """Set the activation (or ``activation[index]``) to 0."""

    def edit(x: torch.Tensor, name: str) -> torch.Tensor:
        return torch.zeros_like(x) if index is None else _put(x, index, 0.0)

    edit.__qualname__ = f"zero(index={index!r})"
    return edit


def scale(factor: float, index: Index = None) -> Edit:
    """Multiply the activation (or ``activation[index]``) by ``factor``."""

    def edit(x: torch.Tensor, name: str) -> torch.Tensor:
        return x * factor if index is None else _put(x, index, x[index] * factor)

    edit.__qualname__ = f"scale({factor!r}, index={index!r})"
    return edit


def replace(value: torch.Tensor | float, index: Index = None) -> Edit:
    """Put ``value`` (broadcastable to ``activation[index]``) in place of the activation."""

    def edit(x: torch.Tensor, name: str) -> torch.Tensor:
        target = x if index is None else x[index]
        v = torch.as_tensor(value, dtype=x.dtype, device=x.device)
        try:
            torch.broadcast_shapes(v.shape, target.shape)  # type: ignore[no-untyped-call]  # torch leaves it unannotated
        except RuntimeError:
            raise ValueError(
                f"replace: value of shape {tuple(v.shape)} does not broadcast to {name}"
                f"{'' if index is None else f'[{index!r}]'} of shape {tuple(target.shape)}"
            ) from None
        return _put(x, index, v)

    edit.__qualname__ = f"replace(index={index!r})"
    return edit


def ablate_head(head: int | Iterable[int]) -> Edit:
    """Zero one head (or several) of a head-split activation ``(B, H, T, ·)``: ``hook_z`` removes what the head
    writes; at ``hook_weights`` the head attends nowhere (its z becomes 0 too); at ``hook_scores`` (before the
    mask and softmax) it attends uniformly instead; ``hook_k``/``hook_v`` count Hkv heads."""
    heads = [head] if isinstance(head, int) else list(head)

    def edit(x: torch.Tensor, name: str) -> torch.Tensor:
        if x.dim() != 4:
            raise ValueError(
                f"ablate_head: {name} has shape {tuple(x.shape)}, not a head-split (B, H, T, ·) "
                "tensor; use it at an attention hook (hook_q, hook_k, hook_v, hook_scores, "
                "hook_weights, hook_z)"
            )
        bad = [h for h in heads if not -x.shape[1] <= h < x.shape[1]]
        if bad:
            raise ValueError(f"ablate_head: head {bad[0]} does not exist at {name}, which has {x.shape[1]} heads")
        return _put(x, (slice(None), heads), 0.0)

    edit.__qualname__ = f"ablate_head({head!r})"
    return edit


def patch_from(cache: Mapping[str, torch.Tensor], index: Index = None, *, name: str | None = None) -> Edit:
    """Put the value a ``capture()`` recorded in another run (at the same hook, or at ``name``) in place of the
    activation, or only ``[index]`` of it. The two runs must have the same shape there (same B and T)."""

    def edit(x: torch.Tensor, hook: str) -> torch.Tensor:
        key = name or hook
        if key not in cache:
            raise ValueError(
                f"patch_from: the cache holds no {key!r}; record it in the source run with capture(model, {key!r})"
            )
        source = cache[key]
        if source.shape != x.shape:
            raise ValueError(
                f"patch_from: {hook} has shape {tuple(x.shape)} here but {key} has "
                f"{tuple(source.shape)} in the cache; patch between runs of the same shape"
            )
        source = source.to(device=x.device, dtype=x.dtype)
        return source.clone() if index is None else _put(x, index, source[index])

    edit.__qualname__ = f"patch_from(index={index!r})"
    return edit


def _edits_by_hook(
    model: nn.Module, edits: Mapping[str, Edit | Iterable[Edit]]
) -> dict[str, tuple[nn.Module, list[Edit]]]:
    if not isinstance(edits, Mapping) or not edits:
        raise ValueError(
            f"edits must be a non-empty mapping {{hook name or pattern: edit or list of edits}}, got {edits!r}"
        )
    plan: dict[str, tuple[nn.Module, list[Edit]]] = {}
    for pattern, value in edits.items():
        fns = [value] if callable(value) else list(value)
        if not fns or not all(callable(f) for f in fns):
            raise ValueError(
                f"edits[{pattern!r}] must be a callable edit(activation, name) or a list of them, got {value!r}"
            )
        for name, module in select_hooks(model, pattern).items():
            plan.setdefault(name, (module, []))[1].extend(fns)
    return plan


@contextmanager
def patching(model: nn.Module, edits: Mapping[str, Edit | Iterable[Edit]]) -> Iterator[dict[str, int]]:
    """Edit the selected hook points in every forward inside the ``with`` block; yields ``{name: edited calls}``."""
    plan = _edits_by_hook(model, edits)  # bad names are refused before anything is attached
    fired = dict.fromkeys(plan, 0)
    handles = []

    def editor(name: str, fns: list[Edit]) -> Callable[[nn.Module, tuple[object, ...], torch.Tensor], torch.Tensor]:
        def hook(_module: nn.Module, _args: tuple[object, ...], output: torch.Tensor) -> torch.Tensor:
            x = output
            for fn in fns:
                new = fn(x, name)
                if new is None:
                    continue
                if not isinstance(new, torch.Tensor) or new.shape != x.shape:
                    got = tuple(new.shape) if isinstance(new, torch.Tensor) else type(new).__name__
                    raise ValueError(
                        f"the edit {getattr(fn, '__qualname__', fn)!r} at {name} returned {got}; "
                        f"an edit must return a tensor of shape {tuple(x.shape)} (or None)"
                    )
                x = new
            fired[name] += 1
            return x

        return hook

    try:
        for name, (module, fns) in plan.items():
            handles.append(module.register_forward_hook(editor(name, fns)))
        yield fired
    finally:
        for h in handles:
            h.remove()


def run_patched(model: nn.Module, edits: Mapping[str, Edit | Iterable[Edit]], *args: Any, **kwargs: Any) -> Any:
    """One forward ``model(*args, **kwargs)`` with ``edits`` applied; nothing stays attached afterwards."""
    with patching(model, edits):
        return model(*args, **kwargs)
