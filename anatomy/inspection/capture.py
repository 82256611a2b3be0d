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
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import torch
from torch import nn

from anatomy.components.hook_point import HookPoint


def hook_names(model: nn.Module) -> list[str]:
    return [name for name, m in model.named_modules() if isinstance(m, HookPoint)]


@contextmanager
def capture(model: nn.Module, names: str | Iterable[str] | None = None, *,
            detach: bool = True) -> Iterator[dict[str, torch.Tensor]]:
    """Yield a dict filled, during the ``with`` block, with the output of every selected hook point."""
    patterns = [names] if isinstance(names, str) else (["*"] if names is None else list(names))
    available = hook_names(model)
    chosen = [n for n in available if any(fnmatch.fnmatchcase(n, p) for p in patterns)]
    missing = [p for p in patterns if not any(fnmatch.fnmatchcase(n, p) for n in available)]
    if missing:
        sample = ", ".join(available[:8]) + (", ..." if len(available) > 8 else "")
        raise ValueError(f"names {missing} match no hook point of this model; available: {sample}")
    cache: dict[str, torch.Tensor] = {}
    modules = dict(model.named_modules())
    handles = []

    def recorder(name: str):
        def hook(_module, _args, output):
            cache[name] = output.detach() if detach else output

        return hook

    try:
        for name in chosen:
            handles.append(modules[name].register_forward_hook(recorder(name)))
        yield cache
    finally:
        for h in handles:
            h.remove()
