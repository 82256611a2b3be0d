"""``capture(model, names=...)``: record what the hook points see during a forward pass.

    with capture(model, names=["blocks.0.attn.hook_weights"]) as cache:
        model(ids)
    cache["blocks.0.attn.hook_weights"]        # (B, H, T, S)

Names are module paths (``model.named_modules()``); shell-style patterns (``"*.hook_weights"``) select several.
The hooks are removed when the block exits, also when the forward raises. Asking for a score or weight hook
makes ``kernel="auto"`` attention layers use the math kernel for that layer only (said once in the log).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

import torch
from torch import nn

from anatomy.components.hook_point import HookPoint


def hook_names(model: nn.Module) -> list[str]:
    return [name for name, m in model.named_modules() if isinstance(m, HookPoint)]


def select_hooks(model: nn.Module, names: str | Iterable[str] | None) -> dict[str, HookPoint]:
    """The hook points that module-path ``names`` (or shell-style patterns) select, in model order; a pattern
    matching nothing is refused with the first available names."""
    patterns = [names] if isinstance(names, str) else (["*"] if names is None else list(names))
    available = {name: m for name, m in model.named_modules() if isinstance(m, HookPoint)}
    missing = [p for p in patterns if not any(fnmatch.fnmatchcase(n, p) for n in available)]
    if missing:
        listed = list(available)
        sample = ", ".join(listed[:8]) + (", ..." if len(listed) > 8 else "")
        raise ValueError(f"names {missing} match no hook point of this model; available: {sample}")
    return {n: m for n, m in available.items() if any(fnmatch.fnmatchcase(n, p) for p in patterns)}


@contextmanager
def capture(
    model: nn.Module, names: str | Iterable[str] | None = None, *, detach: bool = True
) -> Iterator[dict[str, torch.Tensor]]:
    """Yield a dict filled, during the ``with`` block, with the output of every selected hook point."""
    chosen = select_hooks(model, names)
    cache: dict[str, torch.Tensor] = {}
    handles = []

    def recorder(name: str) -> Callable[[nn.Module, tuple[object, ...], torch.Tensor], None]:
        def hook(_module: nn.Module, _args: tuple[object, ...], output: torch.Tensor) -> None:
            cache[name] = output.detach() if detach else output

        return hook

    try:
        for name, module in chosen.items():
            handles.append(module.register_forward_hook(recorder(name)))
        yield cache
    finally:
        for h in handles:
            h.remove()
