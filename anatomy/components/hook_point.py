"""``HookPoint``: an identity module placed at every interesting activation.

The components place them (``hook_q``, ``hook_scores``, ``hook_weights``, ...) and know nothing of who looks.
Inspection attaches ordinary PyTorch forward hooks to them; a module never stores activations on itself.
Names come from module paths, so the weights of layer 0 are ``blocks.0.attn.hook_weights``.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.modules import module as _module


class HookPoint(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        # A model has dozens of hook points per layer; with nothing attached (the usual case) skip nn.Module's
        # call machinery entirely. Any hook — on this module or a global one — takes the ordinary path.
        if (
            self._forward_hooks
            or self._forward_pre_hooks
            or _module._global_forward_hooks
            or _module._global_forward_pre_hooks
        ):
            out: torch.Tensor = super().__call__(x)
            return out
        return x

    @property
    def has_hooks(self) -> bool:
        return bool(self._forward_hooks or self._forward_pre_hooks)


def hooked(module: nn.Module, name: str) -> bool:
    """Whether ``module``'s hook point ``name`` has a hook of its own: ``module.<name>.has_hooks`` without
    ``nn.Module.__getattr__`` (about 10x cheaper), for checks on every forward."""
    point = module._modules[name]
    assert point is not None, name
    return bool(point._forward_hooks or point._forward_pre_hooks)


def mirror_hook_points(model: nn.Module) -> None:
    """Make ``self.hook_q`` & co. plain attribute reads in ``model`` and every module under it.

    ``nn.Module`` keeps submodules in ``_modules`` and finds them through ``__getattr__``, a Python call after a
    failed lookup, on every access: a model reads its hook points about 15 times per layer per forward, which is
    5-10% of a forward at the claims lab's sizes. A copy of each hook point's reference in its parent's instance
    ``__dict__`` is found first. Hook points are places to attach hooks, never replaced; should one be replaced
    by assignment (``block.hook_z = other``), ``nn.Module.__setattr__`` drops the copy, so the two agree."""
    for module in model.modules():
        for name, child in module._modules.items():
            if isinstance(child, HookPoint):
                module.__dict__[name] = child
