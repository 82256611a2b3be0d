"""The decode step of ``generate``: the model's own ``forward``, run on a flat view of the model.

At batch 1 a decode step of a small model is mostly Python, and much of it is ``nn.Module``'s call and attribute
machinery. ``generate`` (``anatomy.generation.decoding``) decodes through one flat view of the model
(``anatomy.generation.flat``: the same classes' methods, sub-modules as plain attributes, hook points as the
identity) and calls the view exactly as the module path calls the model::

    model(ids (B, 1), mask (B, S + 1), kv_caches=caches, use_cache=True).logits[:, -1]      # (B, V)

so there is one copy of every order (the block's norm, attention, residual and FFN; attention's projections,
split, rotation, cache, kernel and merge) and the view cannot drift from the modules. tests/generation/test_fast.py
holds the step's logits equal to the module path and the greedy tokens identical, batched and left-padded.

A view runs no hooks, so ``refusal(model)`` declines a model with hooks attached (inspection needs the modules)
and a model holding a module of a class from outside this package and ``torch.nn`` (whose methods a view cannot
vouch for, such as a parametrized weight); ``generate`` then calls the modules.
"""

from __future__ import annotations

from torch import nn
from torch.nn.modules import module as _module

_OWN = ("anatomy.", "torch.nn.modules.")  # the classes a view runs: this package's and torch.nn's own


def _hooked(model: nn.Module) -> str | None:
    # The one private name left here: torch has no public way to ask whether a global module hook is registered
    # (``register_module_forward_hook`` returns a handle and nothing lists them), and a view never enters
    # ``nn.Module.__call__``, where those hooks run, so without this check a global hook would silently miss every
    # decode step (tests/generation/test_fast.py registers one). The compiled step needs no view: it traces the
    # modules' own ``__call__``; the view stays for the eager steps ``compile="auto"`` picks for short generations.
    if _module._global_forward_hooks or _module._global_forward_pre_hooks or _module._global_backward_hooks:
        return "a global module hook is registered"
    for name, m in model.named_modules():
        if m._forward_hooks or m._forward_pre_hooks:
            return f"a forward hook is attached to {name or 'the model'}"
    return None


def refusal(model: nn.Module) -> str | None:
    """Why ``model`` cannot decode through a flat view (``None``: it can)."""
    hooked = _hooked(model)
    if hooked is not None:
        return f"{hooked} (inspection needs the module path)"
    for name, m in model.named_modules():
        if not type(m).__module__.startswith(_OWN):
            return (
                f"{name or 'the model'} is a {type(m).__module__}.{type(m).__name__}, a class from outside "
                "anatomy and torch.nn"
            )
    return None
