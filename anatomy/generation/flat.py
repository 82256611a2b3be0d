"""Flat views: a module tree's own ``forward`` code, run without ``nn.Module``'s call machinery.

At batch 1 a decode step of a small model is mostly Python, not arithmetic, and much of that Python is
``nn.Module.__call__`` (hook dispatch, ``_call_impl``) and ``nn.Module.__getattr__`` (a failed attribute lookup
before ``_modules`` / ``_parameters`` are searched), a few microseconds per module and a hundred modules per token.
``flat(module)`` returns a *view* of the module that runs the very same methods of the module's class (``forward``,
``before``/``after``, ``rotate_for``...), with

- the module's instance attributes, parameters and buffers as plain attributes (found at once);
- every sub-module replaced by its own flat view, so ``self.q_proj(x)`` is a direct call of ``Linear.forward``;
- every ``HookPoint`` replaced by the identity (a view is only made when no hook is attached anywhere);
- a method wrapped on the instance (``anatomy.components.wrapping``: a bug-zoo fault) run by the view as the
  module runs it (the view is of the instance's class, and holds its wrappers);
- every plain ``nn.Linear`` replaced by its one op with the weights bound (``F.linear(x, weight, bias)``, which is
  all ``Linear.forward`` does) and its ``weight`` / ``bias`` / ``in_features`` / ``out_features`` kept.

No arithmetic is written here: a view does what its module does, in the order the module's code says, so there is
no second copy of the block's order to keep in step. A view's class is a subclass of the module's class, made once
per class, whose ``__call__`` is the class's ``forward`` and whose attribute access is ``object``'s (``FlatView``
comes first in its bases), so ``isinstance(view, cls)``, ``super()``, properties and methods are the class's own
with no lookup of ours. A view is a snapshot: it reads the parameter *tensors* (so training or
``load_state_dict`` in place is seen) but not later reassignments of sub-modules or attributes; make it for one
``generate`` call, when ``fast.refusal`` says the model holds no hooks.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from anatomy.components.hook_point import HookPoint


class _Identity:
    """A hook point with nothing attached: returns its input (``has_hooks`` is False, as ``hooked`` expects)."""

    __slots__ = ()
    _forward_hooks: dict[int, Any] = {}
    _forward_pre_hooks: dict[int, Any] = {}
    has_hooks = False

    def __call__(self, x: Any) -> Any:
        return x


_IDENTITY = _Identity()


class _LinearOp(functools.partial):  # type: ignore[type-arg]
    """An ``nn.Linear``'s forward with its weights bound: ``op(x) = F.linear(x, weight, bias)``, called in C."""

    weight: torch.Tensor
    bias: torch.Tensor | None
    in_features: int
    out_features: int


def _linear(module: nn.Linear) -> _LinearOp:
    op = _LinearOp(F.linear, weight=module.weight, bias=module.bias)
    op.weight, op.bias = module.weight, module.bias
    op.in_features, op.out_features = module.in_features, module.out_features
    return op


class FlatView:
    """What every view class has first in its bases (:func:`_view_class`): plain attribute access and assignment
    (``object``'s, not ``nn.Module``'s), and a miss is an ``AttributeError`` at once."""

    _view_of: type = nn.Module

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(f"{type(self)._view_of.__name__} view has no attribute {name!r}")

    __setattr__ = object.__setattr__
    __delattr__ = object.__delattr__

    def __repr__(self) -> str:
        return f"<flat view of {type(self)._view_of.__name__}>"


_CLASSES: dict[type, type] = {}


def _view_class(cls: type) -> type:
    """The view class of module class ``cls``: a subclass of ``cls`` (so ``isinstance``, ``super()``, methods,
    properties and containers' ``__iter__`` / ``__len__`` / ``__getitem__`` are ``cls``'s own) whose ``__call__`` is
    ``cls.forward`` (or ``cls``'s own ``__call__``), after :class:`FlatView`."""
    view = _CLASSES.get(cls)
    if view is None:
        call = cls.__call__
        namespace: dict[str, Any] = {
            "_view_of": cls,
            "__call__": cls.forward if call is nn.Module.__call__ else call,  # type: ignore[attr-defined]
            "__module__": __name__,
        }
        view = _CLASSES[cls] = type(f"Flat{cls.__name__}", (FlatView, cls), namespace)
    return view


def flat(module: nn.Module) -> Any:
    """The flat view of ``module`` and everything under it (hook points become the identity)."""
    if isinstance(module, HookPoint):
        return _IDENTITY
    if type(module) is nn.Linear:
        return _linear(module)
    children = {name: (None if child is None else flat(child)) for name, child in module._modules.items()}
    view: Any = object.__new__(_view_class(type(module)))  # no __init__: the module's state is copied below
    state = view.__dict__
    state.update(module.__dict__)  # training, sizes, settings, mirrored hook points (replaced below)
    state.update(module._parameters)
    state.update(module._buffers)
    state.update(children)
    state["_modules"] = children
    return view
