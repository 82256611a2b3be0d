"""Building a learner's whole language model for the trace, as GPT.md's contract says: ``CLASS(vocab_size, d_model,
n_heads, n_layers, block_size)`` by keyword (under the names people give them) or by position, ``CLASS(config)``
with a config class found in the same file, or a factory (``--factory``) called the same way.

This is the trace's own small builder (the doctor's lives on the gpt-doctor branch); it loads the file with the
block doctor's loader (``doctor/loading/building.py``) and runs the constructor under its time limit.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import sys
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from anatomy.doctor.loading.building import resolve_target
from anatomy.doctor.loading.limits import Hung, guard
from anatomy.doctor.loading.subject import CheckError, CheckTimeout, ModuleExited, _quiet, one_line

ORDER = ("vocab_size", "d_model", "n_heads", "n_layers", "block_size")
NAMES: dict[str, tuple[str, ...]] = {  # our size → the names learners give it (lower case)
    "vocab_size": ("vocab_size", "vocab", "n_vocab", "ntoken", "num_tokens", "vocab_len"),
    "d_model": ("d_model", "n_embd", "n_embed", "embed_dim", "emb_dim", "dim", "hidden_size", "embedding_dim"),
    "n_heads": ("n_heads", "n_head", "num_heads", "nhead", "heads", "num_attention_heads"),
    "n_layers": ("n_layers", "n_layer", "num_layers", "nlayers", "layers", "depth", "num_blocks", "n_blocks"),
    "block_size": ("block_size", "max_len", "max_seq_len", "context_length", "seq_len", "n_ctx", "n_positions"),
    "dropout": ("dropout", "dropout_rate", "resid_pdrop", "attn_pdrop", "embd_pdrop", "p_drop"),
}


def role(name: str) -> str | None:
    low = name.lower()
    return next((k for k, names in NAMES.items() if low in names), None)


def _params(fn: Any) -> list[inspect.Parameter]:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return []
    skip = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    return [p for p in sig.parameters.values() if p.name != "self" and p.kind not in skip]


class Config(dict[str, Any]):
    """A config read by attribute or by key under any of the names in :data:`NAMES` (no config class found)."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


def _config(cls: type | None, sizes: dict[str, Any]) -> Any:
    if cls is None:
        return Config({n: sizes[k] for k, names in NAMES.items() for n in names})
    if dataclasses.is_dataclass(cls):
        fields = [f.name for f in dataclasses.fields(cls)]
    else:
        fields = [p.name for p in _params(cls)] + [n for n in vars(cls) if not n.startswith("_")]
    values = {n: sizes[k] for n in fields if (k := role(n)) is not None and k != "dropout"}
    if not values:  # a config that takes anything (minGPT's CfgNode(**kwargs)): every name people use
        values = {n: sizes[k] for k, names in NAMES.items() if k != "dropout" for n in names}
    accepted = {p.name for p in _params(cls)}
    try:
        cfg = cls(**{n: v for n, v in values.items() if n in accepted})
    except Exception as err:  # noqa: BLE001 - the learner's config class
        raise CheckError(f"could not build the config {cls.__name__}(...): {one_line(err)}") from None
    for name, value in values.items():
        try:
            setattr(cfg, name, value)
        except Exception:  # noqa: BLE001, S112 - a frozen config keeps what its constructor was given
            continue
    return cfg


def _config_class(space: dict[str, Any], param: inspect.Parameter) -> type | None:
    ann = space.get(param.annotation) if isinstance(param.annotation, str) else param.annotation
    if inspect.isclass(ann) and ann is not inspect.Parameter.empty and ann.__module__ not in ("builtins", "typing"):
        return ann
    found = [
        v
        for n, v in space.items()
        if inspect.isclass(v)
        and not issubclass(v, nn.Module)
        and getattr(v, "__module__", None) == space.get("__name__")
        and (dataclasses.is_dataclass(v) or any(w in n.lower() for w in ("config", "args", "cfg")))
    ]
    return found[0] if len(found) == 1 else None


def arguments(fn: Any, sizes: dict[str, Any], space: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    """How to call ``fn`` with ``sizes``: (args, kwargs), or a :class:`CheckError` naming its parameters."""
    params = _params(fn.__init__ if inspect.isclass(fn) else fn)
    required = [p for p in params if p.default is inspect.Parameter.empty]
    roles = {p.name: role(p.name) for p in params}
    if len(required) == 1 and roles[required[0].name] is None:
        return [_config(_config_class(space, required[0]), sizes)], {}
    if all(roles[p.name] is not None for p in required):
        return [], {p.name: sizes[k] for p in params if (k := roles[p.name]) is not None}
    if len(required) == len(ORDER):
        return [sizes[k] for k in ORDER], {}
    raise CheckError(
        f"cannot tell how to build it from ({', '.join(p.name for p in required)}); expected CLASS(vocab_size, "
        "d_model, n_heads, n_layers, block_size), CLASS(config) or --factory FUNC"
    )


def build_model(
    target: Any, factory: str | None, sizes: dict[str, Any], seed: int, timeout: float | None
) -> tuple[nn.Module, str]:
    """The learner's model in float64 and eval mode, built under a forked seeded RNG (``sizes``: :data:`ORDER`
    and ``dropout``)."""
    obj, label, name = resolve_target(target, factory, timeout)
    if isinstance(obj, nn.Module):
        return copy.deepcopy(obj).double().eval(), label
    mod = sys.modules.get(getattr(obj, "__module__", "") or "")
    space = dict(vars(mod)) if mod is not None else {}
    space = space or dict(getattr(getattr(obj, "__init__", None), "__globals__", None) or {})
    space = space or dict(getattr(obj, "__globals__", None) or {})
    args, kwargs = arguments(obj, sizes, space)
    shown = ", ".join(
        [type(a).__name__ + "(...)" if not isinstance(a, int) else str(a) for a in args]
        + [f"{k}={v!r}" for k, v in kwargs.items()]
    )
    step = (f"{label}: {name}({shown}) (building the model)", f"{label}：构造模型 {name}({shown}) 时")
    try:
        with _quiet(), torch.random.fork_rng(devices=[]), guard(timeout, lambda: step):
            torch.manual_seed(seed)
            module = _call(obj, args, kwargs)
    except Hung as hung:
        raise CheckTimeout.from_hung(hung) from None
    except SystemExit as err:
        raise ModuleExited(f"{label}: {name}({shown}), building the model,", err.code, step[1]) from None
    except Exception as err:  # noqa: BLE001 - the learner's constructor
        raise CheckError(f"{name}({shown}) failed: {one_line(err)}") from None
    if not isinstance(module, nn.Module):
        raise CheckError(f"{name}({shown}) returned {type(module).__name__}; expected a torch.nn.Module")
    try:
        return module.double().eval(), label
    except Exception as err:  # noqa: BLE001
        raise CheckError(f"could not move {name} to float64: {one_line(err)}") from None


def _call(obj: Callable[..., Any], args: list[Any], kwargs: dict[str, Any]) -> Any:
    return obj(*args, **kwargs)


def is_model(obj: Any) -> bool:
    """A class or factory worth building as a whole model: one config argument, a vocabulary size among its
    parameters, or the five sizes; an instance holding an ``nn.Embedding``."""
    if isinstance(obj, nn.Module):
        return any(isinstance(m, nn.Embedding) for m in obj.modules())
    if not callable(obj):
        return False
    params = _params(obj.__init__ if inspect.isclass(obj) else obj)
    required = [p for p in params if p.default is inspect.Parameter.empty]
    if any(role(p.name) == "vocab_size" for p in params):
        return True
    return len(required) == 1 and role(required[0].name) is None or len(required) == len(ORDER)
