"""TransformerLens's everyday surface on our models, beside ``run_with_cache``/``run_with_hooks`` (hooked.py):

    model.hook_dict["blocks.0.attn.hook_z"]          # a hook point under TransformerLens's name (its layout)
    model.add_hook("blocks.0.attn.hook_z", fn)       # stays until model.reset_hooks(); a filter works too
    model.add_hook(lambda n: n.endswith("hook_pattern"), fn, is_permanent=True)
    model.reset_hooks()                              # removes the non-permanent ones (including_permanent=True: all)
    model.mod_dict["blocks.0.attn"]                  # modules by TransformerLens's names, and by ours
    model.cfg.n_layers, model.cfg.d_head             # TransformerLens's config names (ours: model.config)
    model.to_tokens("text"), model.to_string(ids), model.to_str_tokens("text")   # tl_tokens.py

``hook_dict`` holds one entry per hook point: its TransformerLens name where the model has one (hooking it sees
TransformerLens's layout), ours where TransformerLens has none (an encoder-decoder's points). A name the model
refuses (``blocks.0.ln1.hook_normalized``: computed in the cache only; the bridge's ``hook_q_input``...) raises
``KeyError`` with the reason. Hooks added here are forward hooks that stay attached until ``reset_hooks``; the
handles are kept in a table of this module (weakly keyed by the model), never on a module.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from torch import nn
from torch.utils.hooks import RemovableHandle

from anatomy.inspection.capture import hook_names
from anatomy.inspection.hooked import HookFn, LensHook, _attach, _resolve, filter_points
from anatomy.inspection.tl_names import BRIDGE_ALIAS, CACHE_ONLY, TLPoint, TLTable, model_parts, norm_kind, tl_points

_ADDED: weakref.WeakKeyDictionary[nn.Module, list[tuple[str, bool, list[RemovableHandle]]]] = (
    weakref.WeakKeyDictionary()
)


@dataclass
class LensHookPoint:
    """What ``model.hook_dict[name]`` holds: TransformerLens's ``HookPoint`` calls for one point of ``model``."""

    model: nn.Module
    name: str
    point: TLPoint | None  # None: one of our names (our layout)

    def add_hook(self, hook: HookFn, dir: str = "fwd", is_permanent: bool = False, **_: Any) -> None:
        add_hook(self.model, self.name, hook, dir=dir, is_permanent=is_permanent)

    def remove_hooks(self, dir: str = "fwd", including_permanent: bool = False, **_: Any) -> None:
        _remove(self.model, including_permanent, only=self.name)

    def layer(self) -> int:
        return LensHook(self.name).layer()


class HookDict(dict[str, LensHookPoint]):
    """``name → LensHookPoint``; a name the model refuses raises ``KeyError`` with the reason."""

    def __init__(self, points: dict[str, LensHookPoint], table: TLTable) -> None:
        super().__init__(points)
        self.table = table

    def __missing__(self, name: str) -> Any:
        raise KeyError(f"{name}: {why_not(self.table, name)}")


def why_not(table: TLTable, name: str) -> str:
    """Why ``name`` is not a hook point of the model: the table's reason, or what the name is."""
    if name in table.refused:
        return table.refused[name]
    point = table.points.get(name)
    if point is not None and point.kind.startswith(CACHE_ONLY):
        return "computed from the cache only (no hook point of ours carries it): read it from run_with_cache"
    if name.endswith((".hook_in", ".hook_out", ".hook_hidden_states")) or name == "hook_unembed":
        return BRIDGE_ALIAS
    if table.why_none is not None:
        return table.why_none
    return "no hook point of this model has this name (model.hook_dict lists them)"


def hook_dict(model: nn.Module) -> HookDict:
    """One entry per hook point that a hook can be put on, under one name (TransformerLens's where it has one)."""
    table = tl_points(model)
    chosen = filter_points(table, hook_names(model), lambda _n: True)
    points = {n: LensHookPoint(model, n, p) for n, p in chosen if p is None or not p.kind.startswith(CACHE_ONLY)}
    return HookDict(points, table)


# TransformerLens's module names → ours, inside one block and around the stack
_BLOCK_MODULES = {"attn": "attn", "mlp": "ffn", "ln1": "attn_add_norm.norm", "ln2": "ffn_add_norm.norm"}


def mod_dict(model: nn.Module) -> dict[str, Any]:
    """Every module by our name (``stack.blocks.0.attn``), the blocks' modules by TransformerLens's
    (``blocks.0.attn``, ``blocks.0.mlp``, ``blocks.0.ln1``, ``embed``, ``pos_embed``, ``ln_final``, ``unembed``)
    and every hook point of ``hook_dict``."""
    out: dict[str, Any] = dict(model.named_modules())
    parts = model_parts(model)
    if parts is not None:
        named = {
            "embed": getattr(parts.embeddings, "embed_tokens", None),
            "pos_embed": getattr(parts.embeddings, "positional", None),
            "ln_final": parts.stack.final_norm,
            "unembed": parts.lm_head,
            "blocks": parts.stack.blocks,
        }
        for i, block in enumerate(parts.stack.blocks):
            named[f"blocks.{i}"] = block
            for tl, ours in _BLOCK_MODULES.items():
                named[f"blocks.{i}.{tl}"] = block.get_submodule(ours)
        out.update({k: v for k, v in named.items() if isinstance(v, nn.Module)})
    out.update(hook_dict(model))
    return out


def add_hook(
    model: nn.Module,
    name: str | Callable[[str], bool],
    hook: HookFn,
    dir: str = "fwd",
    is_permanent: bool = False,
    **_: Any,
) -> None:
    """Attach ``hook(activation, hook)`` at ``name`` (a name or a filter, as in ``fwd_hooks``) until
    ``reset_hooks``; ``is_permanent=True``: until ``reset_hooks(including_permanent=True)``."""
    if dir != "fwd":
        raise ValueError(
            f"add_hook(dir={dir!r}): backward hooks are not offered; register a tensor hook "
            "(act.register_hook) inside a forward hook instead"
        )
    if not callable(hook):
        raise ValueError(f"add_hook: the hook must be a function (activation, hook) -> tensor or None, got {hook!r}")
    modules = dict(model.named_modules())
    handles: list[RemovableHandle] = []
    try:
        for point_name, point in _resolve(model, tl_points(model), hook_names(model), name):
            _attach(model, modules, point_name, point, hook, None, handles)
    except ValueError as err:
        for h in handles:
            h.remove()
        raise ValueError(str(err).replace("fwd_hooks:", "add_hook:", 1)) from None
    _ADDED.setdefault(model, []).append((name if isinstance(name, str) else "<filter>", is_permanent, handles))


def _remove(model: nn.Module, including_permanent: bool, only: str | None = None) -> None:
    kept = []
    for entry in _ADDED.get(model, []):
        name, permanent, handles = entry
        if (permanent and not including_permanent) or (only is not None and name != only):
            kept.append(entry)
            continue
        for h in handles:
            h.remove()
    _ADDED[model] = kept


def reset_hooks(
    model: nn.Module,
    clear_contexts: bool = True,
    direction: str = "both",
    including_permanent: bool = False,
    **_: Any,
) -> None:
    """Remove the hooks ``add_hook`` attached (the permanent ones too with ``including_permanent=True``)."""
    if direction not in ("fwd", "bwd", "both"):
        raise ValueError(f"reset_hooks: direction must be 'fwd', 'bwd' or 'both', got {direction!r}")
    _remove(model, including_permanent)


# our positional schemes by TransformerLens's positional_embedding_type
_POSITIONAL = {"learned": "standard", "rope": "rotary", "alibi": "alibi", "t5": "relative_positional_bias"}


@dataclass(frozen=True)
class LensConfig:
    """``model.cfg``: the sizes TransformerLens code reads, by its names, from our ``ModelConfig`` and modules
    (``model.config`` keeps ours). ``n_key_value_heads`` is None without GQA and ``d_mlp`` the FFN's hidden width,
    as there; ``positional_embedding_type`` maps learned → "standard", rope → "rotary", t5 →
    "relative_positional_bias" and keeps our name for the others ("sinusoidal", "shaw", "none")."""

    n_layers: int
    d_model: int
    n_heads: int
    d_head: int
    d_mlp: int
    d_vocab: int
    d_vocab_out: int
    n_ctx: int
    n_key_value_heads: int | None
    normalization_type: str
    positional_embedding_type: str
    gated_mlp: bool
    eps: float
    device: Any
    dtype: Any
    default_prepend_bos: bool = True


def lens_config(model: nn.Module) -> LensConfig:
    config: Any = getattr(model, "config", None)
    parts = model_parts(model)
    if config is None or parts is None or not len(parts.stack.blocks):
        raise ValueError(
            f"{type(model).__name__} has no TransformerLens cfg: it describes one stack of blocks; read model.config"
        )
    ffn = parts.stack.blocks[0].ffn
    first = next(model.parameters())
    return LensConfig(
        n_layers=len(parts.stack.blocks),
        d_model=config.d_model,
        n_heads=config.n_heads,
        d_head=config.dh,
        d_mlp=ffn.up_proj.out_features,
        d_vocab=config.vocab_size,
        d_vocab_out=parts.lm_head.out_features if parts.lm_head is not None else config.vocab_size,
        n_ctx=config.max_seq_len,
        n_key_value_heads=None if config.kv_heads == config.n_heads else config.kv_heads,
        normalization_type=norm_kind(model),
        positional_embedding_type=_POSITIONAL.get(config.positional, config.positional),
        gated_mlp=bool(getattr(ffn, "gated", False)),
        eps=config.norm_eps,
        device=first.device,
        dtype=first.dtype,
    )
