"""TransformerLens's two calls on our models: ``run_with_cache`` and ``run_with_hooks``.

    logits, cache = model.run_with_cache(ids)
    cache["blocks.0.attn.hook_pattern"]          # (B, H, T, S), TransformerLens's name
    cache["pattern", 0]                          # the same (get_act_name's shorthand)
    cache["stack.blocks.0.attn.hook_weights"]    # ours, the same tensor

    def zero_head(z, hook):                      # z: (B, T, H, Dh) under the TransformerLens name
        z[:, :, 3] = 0.0                         # head 3 says nothing
    logits = model.run_with_hooks(ids, fwd_hooks=[(get_act_name("z", 0), zero_head)])

A hook function is called ``fn(activation, hook)``, ``hook.name`` being the name it was registered under; what it
returns (a tensor) replaces the activation, and in-place edits of the activation reach the model, as in
TransformerLens. A name or a filter (``lambda name: name.endswith("hook_pattern")``) selects the points; our own
names work too, with our layouts. ``with model.hooks(fwd_hooks=[...]):`` keeps them for every forward of a block.
The model methods (``model.run_with_cache``...) call these functions.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, cast

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from anatomy.inspection.activation_cache import ActivationCache, causal_scores_mask
from anatomy.inspection.capture import capture, hook_names
from anatomy.inspection.tl_names import BRIDGE_ALIAS, CACHE_ONLY, TLPoint, TLTable, heads_last, tl_points
from anatomy.inspection.tl_weights import w_o

HookFn = Callable[[torch.Tensor, "LensHook"], "torch.Tensor | None"]
NameFilter = str | Callable[[str], bool]


@dataclass
class LensHook:
    """What a hook function receives as its second argument: TransformerLens's ``HookPoint`` surface."""

    name: str
    ctx: dict[str, Any] = field(default_factory=dict)  # TransformerLens's HookPoint.ctx: the hook's scratch space

    def layer(self) -> int:
        """The block index in ``name`` (``blocks.3.attn.hook_z`` → 3), as TransformerLens's ``hook.layer()``."""
        parts = self.name.split(".")
        if "blocks" not in parts:
            raise ValueError(f"hook {self.name!r} is not inside a block")
        return int(parts[parts.index("blocks") + 1])


def _output(out: Any) -> Any:
    """The tensor TransformerLens returns: the logits, else the last hidden state."""
    for name in ("logits", "last_hidden_state"):
        value = getattr(out, name, None)
        if isinstance(value, torch.Tensor):
            return value
    return out


def _filter(names_filter: Any) -> Callable[[str], bool]:
    if names_filter is None:
        return lambda _name: True
    if isinstance(names_filter, str):
        return lambda name: name == names_filter
    if callable(names_filter):
        return cast(Callable[[str], bool], names_filter)
    if isinstance(names_filter, Iterable):
        chosen = set(names_filter)
        return lambda name: name in chosen
    raise ValueError(f"names_filter must be None, a name, a list of names or a callable, got {names_filter!r}")


def run_with_cache(
    model: nn.Module,
    *args: Any,
    names_filter: Any = None,
    return_cache_object: bool = True,
    remove_batch_dim: bool = False,
    detach: bool = True,
    **kwargs: Any,
) -> tuple[Any, ActivationCache | dict[str, torch.Tensor]]:
    """``(output, cache)``: one forward ``model(*args, **kwargs)`` with every hook point recorded; the cache answers
    TransformerLens names (its layouts) and ours (our layouts). ``names_filter`` keeps the names it accepts;
    ``return_cache_object=False`` gives a plain dict."""
    if remove_batch_dim:
        raise ValueError("remove_batch_dim=True is not offered; index the batch yourself: cache[name][0]")
    keep = _filter(names_filter)
    if callable(names_filter) and not isinstance(names_filter, str):  # a filter keeps each point under one name
        names = {n for n, _ in filter_points(tl_points(model), hook_names(model), names_filter)}
        keep = names.__contains__
    args, return_type = _lens_inputs(model, args, kwargs)
    with capture(model, None, detach=detach) as raw:
        out = model(*args, **kwargs)
    cache = ActivationCache(model, raw, attention_mask=_mask_of(args, kwargs), keep=keep)
    return _returned(out, args, kwargs, return_type), (cache if return_cache_object else dict(cache.items()))


RETURN_TYPES = ("logits", "loss", "both", None)


def _lens_inputs(model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], str | None]:
    """TransformerLens's inputs: a text or a list of texts is tokenized (``model.to_tokens``), and ``return_type``
    (``"logits"``, the default, ``"loss"``, ``"both"`` or ``None``) is taken out of the forward's arguments."""
    return_type = kwargs.pop("return_type", "logits")
    if return_type not in RETURN_TYPES:
        raise ValueError(f"return_type must be 'logits', 'loss', 'both' or None, got {return_type!r}")
    if kwargs.pop("loss_per_token", False):
        raise ValueError("loss_per_token=True is not offered; compute it from the logits")
    first: Any = args[0] if args else None
    texts = isinstance(first, str) or (
        isinstance(first, list) and bool(first) and all(isinstance(t, str) for t in first)
    )
    if texts:
        from anatomy.inspection.tl_tokens import to_tokens

        args = (to_tokens(model, first), *args[1:])
    if return_type in ("loss", "both") and _mask_of(args, kwargs) is not None:
        raise ValueError(
            f"return_type={return_type!r} with an attention_mask is not offered (which padded positions count is "
            "TransformerLens's choice); take the logits and compute the loss over your positions"
        )
    return args, return_type


def _returned(out: Any, args: tuple[Any, ...], kwargs: dict[str, Any], return_type: str | None) -> Any:
    """What TransformerLens returns for ``return_type``: the logits; the mean next-token cross entropy of the
    input ids (``"loss"``); both; or None."""
    logits = _output(out)
    if return_type == "logits":
        return logits
    if return_type is None:
        return None
    ids = args[0] if args else kwargs.get("input_ids")
    if not isinstance(logits, torch.Tensor) or logits.dim() != 3 or not isinstance(ids, torch.Tensor):
        raise ValueError(f"return_type={return_type!r} needs a language model's logits and the input ids")
    log_probs = logits[:, :-1].float().log_softmax(-1)  # (B, T-1, V): position t predicts token t+1
    loss = -log_probs.gather(-1, ids[:, 1:, None]).mean()
    return loss if return_type == "loss" else (logits, loss)


def _resolve(model: nn.Module, table: TLTable, ours: list[str], key: NameFilter) -> list[tuple[str, TLPoint | None]]:
    """The points ``key`` selects: ``(name, TLPoint)`` for TransformerLens names, ``(name, None)`` for ours."""
    if isinstance(key, str):
        if key in table.points:
            return [(key, table.points[key])]
        matched = [n for n in ours if fnmatch.fnmatchcase(n, key)]
        if matched:
            return [(n, None) for n in matched]
        if key in table.refused:
            raise ValueError(f"fwd_hooks: {key}: {table.refused[key]}")
        if key.endswith((".hook_in", ".hook_out", ".hook_hidden_states")) or key == "hook_unembed":
            raise ValueError(f"fwd_hooks: {key}: {BRIDGE_ALIAS}")
        if table.why_none is not None and (key.startswith(("blocks.", "hook_", "ln_final."))):
            raise ValueError(f"fwd_hooks: {key}: {table.why_none}")
        sample = ", ".join(list(table.points)[:6])
        raise ValueError(
            f"fwd_hooks: {key!r} is no hook of this model; TransformerLens names such as {sample}, ... "
            "or our names (anatomy.inspection.hook_names(model))"
        )
    if not callable(key):
        raise ValueError(f"fwd_hooks: each entry is (name or filter, fn); got {key!r} as the name")
    picked = filter_points(table, ours, key)
    cache_only = [n for n, p in picked if p is not None and p.kind.startswith(CACHE_ONLY)]
    if cache_only:
        raise ValueError(
            f"fwd_hooks: the filter selects {cache_only[0]}, which our models compute only in the cache "
            "(no hook point carries it); narrow the filter (e.g. to mlp.hook_post)"
        )
    if not picked:
        raise ValueError("fwd_hooks: the filter selects no hook of this model")
    return picked


def filter_points(table: TLTable, ours: list[str], key: Callable[[str], bool]) -> list[tuple[str, TLPoint | None]]:
    """The points a filter selects, each once under one name: TransformerLens's names (its layouts) when the filter
    accepts any of them, as in TransformerLens; else ours (our layouts), for filters written for our names. A
    TransformerLens name and ours for the same point are never both offered, so no hook runs twice."""
    tl: list[tuple[str, TLPoint | None]] = [(n, p) for n, p in table.points.items() if key(n)]
    return tl if tl else [(n, None) for n in ours if key(n)]


def _call(fn: HookFn, act: torch.Tensor, hook: LensHook) -> torch.Tensor:
    new = fn(act, hook)
    if new is None:
        return act
    if not isinstance(new, torch.Tensor) or new.shape != act.shape:
        got = tuple(new.shape) if isinstance(new, torch.Tensor) else type(new).__name__
        raise ValueError(
            f"the hook {getattr(fn, '__qualname__', fn)!r} at {hook.name} returned {got}; a hook "
            f"returns None or a tensor of shape {tuple(act.shape)}"
        )
    return new


def _attach(
    model: nn.Module,
    modules: dict[str, nn.Module],
    name: str,
    point: TLPoint | None,
    fn: HookFn,
    attention_mask: torch.Tensor | None,
    handles: list[RemovableHandle],
) -> None:
    hook = LensHook(name)
    if point is None:  # ours: our layout, our name
        handles.append(modules[name].register_forward_hook(lambda _m, _a, out: _call(fn, out, hook)))
        return
    if point.kind.startswith(CACHE_ONLY):
        raise ValueError(
            f"fwd_hooks: {name} is computed from the cache only (no hook point of ours carries it); "
            "hook mlp.hook_post or ln*.hook_scale instead"
        )
    if point.kind == "result":  # the per-head outputs, made from this forward's z and put back as their sum
        attn_prefix = point.source.rsplit(".", 1)[0]
        attn = model.get_submodule(attn_prefix)
        seen: dict[str, torch.Tensor] = {}

        def keep_z(_m: nn.Module, _a: tuple[object, ...], out: torch.Tensor) -> None:
            seen["z"] = out

        def put(_m: nn.Module, _a: tuple[object, ...], out: torch.Tensor) -> torch.Tensor:
            result = torch.einsum("bthd,hdm->bthm", heads_last(seen["z"]), w_o(attn))  # (B, T, H, D)
            new = _call(fn, result, hook)
            bias: torch.Tensor | None = cast(nn.Linear, attn.o_proj).bias
            return new.sum(2) if bias is None else new.sum(2) + bias  # (B, T, D)

        handles.append(modules[f"{attn_prefix}.hook_z"].register_forward_hook(keep_z))
        handles.append(modules[point.source].register_forward_hook(put))
        return
    if point.kind == "scores":

        def scored(_m: nn.Module, _a: tuple[object, ...], out: torch.Tensor) -> torch.Tensor:
            allowed = causal_scores_mask(model, out, attention_mask)  # (B|1, 1, T, S)
            shown = out if allowed is None else out.masked_fill(~allowed, float("-inf"))
            return _call(fn, shown, hook)  # the kernel masks the hidden keys again after this hook

        handles.append(modules[point.source].register_forward_hook(scored))
        return

    def plain(_m: nn.Module, _a: tuple[object, ...], out: torch.Tensor) -> torch.Tensor:
        return point.from_tl(_call(fn, point.to_tl(out), hook))

    handles.append(modules[point.source].register_forward_hook(plain))


@contextmanager
def hooks(
    model: nn.Module,
    fwd_hooks: Sequence[tuple[NameFilter, HookFn]] = (),
    bwd_hooks: Sequence[Any] = (),
    reset_hooks_end: bool = True,
    *,
    attention_mask: torch.Tensor | None = None,
) -> Iterator[nn.Module]:
    """``with model.hooks(fwd_hooks=[...]):`` every forward inside the block runs with the hooks; they are removed
    when it ends, also when it raises. ``attention_mask``: the padding the forwards use, for the -inf of
    ``hook_attn_scores`` (``run_with_hooks`` passes its own)."""
    if bwd_hooks:
        raise ValueError(
            "bwd_hooks are not offered; register a tensor hook (act.register_hook) inside a forward hook instead"
        )
    if not reset_hooks_end:
        raise ValueError("reset_hooks_end=False is not offered: hooks are always removed after the call")
    if isinstance(fwd_hooks, tuple) and len(fwd_hooks) == 2 and callable(fwd_hooks[1]):
        raise ValueError("fwd_hooks is a list of (name or filter, fn) pairs: wrap the pair in [ ]")
    table = tl_points(model)
    ours = hook_names(model)
    modules = dict(model.named_modules())
    handles: list[RemovableHandle] = []
    try:
        for entry in fwd_hooks:
            if not isinstance(entry, (tuple, list)) or len(entry) != 2 or not callable(entry[1]):
                raise ValueError(f"fwd_hooks: each entry is (name or filter, fn(activation, hook)); got {entry!r}")
            key, fn = entry
            for name, point in _resolve(model, table, ours, key):
                _attach(model, modules, name, point, fn, attention_mask, handles)
        yield model
    finally:
        for h in handles:
            h.remove()


def run_with_hooks(
    model: nn.Module,
    *args: Any,
    fwd_hooks: Sequence[tuple[NameFilter, HookFn]] = (),
    bwd_hooks: Sequence[Any] = (),
    reset_hooks_end: bool = True,
    **kwargs: Any,
) -> Any:
    """One forward ``model(*args, **kwargs)`` with ``fwd_hooks = [(name or filter, fn), ...]`` attached; returns the
    output (the logits for a language model; TransformerLens's ``return_type="loss"``, ``"both"`` or ``None``) and
    removes every hook afterwards, also when the forward raises. A text (or list of texts) is tokenized first."""
    args, return_type = _lens_inputs(model, args, kwargs)
    with hooks(model, fwd_hooks, bwd_hooks, reset_hooks_end, attention_mask=_mask_of(args, kwargs)):
        return _returned(model(*args, **kwargs), args, kwargs, return_type)


def _mask_of(args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.Tensor | None:
    """The ``attention_mask`` of a ``model(ids, attention_mask)`` call, by keyword or second position."""
    mask = kwargs.get("attention_mask", args[1] if len(args) > 1 else None)
    return mask if isinstance(mask, torch.Tensor) else None
