"""Faults the doctor switches on in one sub-layer of the reference block, and the one it adds to the bug zoo.

The bug zoo's block faults (``anatomy.pitfalls``) act on every ``AddNorm`` of a model. A learner often gets one
sub-layer right and the other wrong (the residual missing around attention only; ``x = norm(x)`` in the FFN
sub-layer only), so the diagnosis also tries each of them on one sub-layer: ``"no_residual@attn"`` is
``no_residual`` switched on in the reference's ``attn_add_norm`` alone. ``norm_on_query_only`` (a Pre-Norm
block whose attention gets the normalised stream as its queries but the raw stream as keys and values,
``x + attn(norm(x), x, x)``) has a record but no bug-zoo ``apply``: it is switched on here.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from torch import nn

from anatomy import pitfalls
from anatomy.pitfalls import records

SUB_LAYERS = {"attn": "attn_add_norm", "ffn": "ffn_add_norm"}


def per_sub_layer() -> list[str]:
    """The block faults the diagnosis also tries on one sub-layer alone (records with ``sub_layers``)."""
    return records.names(sub_layers=True)


def local_faults() -> list[str]:
    """The doctor's own block faults: diagnosed, with no bug-zoo ``apply`` (switched on here)."""
    return [p.name for p in records.every(diagnosis="block") if p.apply is None]


def split(key: str) -> tuple[str, str | None]:
    """``"no_residual@attn"`` → ``("no_residual", "attn")``; ``"no_scaling"`` → ``("no_scaling", None)``;
    ``"softmax_wrong_axis:dim=-2"`` → ``("softmax_wrong_axis", None)``."""
    name, _, where = key.partition("@")
    return name.partition(":")[0], where or None


def key_of(name: str, params: Mapping[str, Any]) -> str:
    """The key of fault ``name`` tried with ``params`` (a record's ``tries``): ``"name:dim=-2"``."""
    return name + "".join(f":{k}={v!r}" for k, v in params.items())


def params_of(key: str) -> dict[str, Any]:
    """The parameters a key carries: ``"softmax_wrong_axis:dim=-2"`` → ``{"dim": -2}``."""
    out = {}
    for part in key.partition("@")[0].split(":")[1:]:
        k, _, v = part.partition("=")
        out[k] = ast.literal_eval(v)
    return out


def severity(name: str) -> str:
    return records.severity(name)


def block_fault_keys() -> list[str]:
    return [f"{n}@{w}" for n in per_sub_layer() for w in SUB_LAYERS] + local_faults()


@contextmanager
def inject(ref: nn.Module, key: str) -> Iterator[nn.Module]:
    """Switch fault ``key`` on in ``ref`` (a bug-zoo name, ``name@attn|ffn``, or a local fault); ValueError when
    it has nothing to change there, as :func:`pitfalls.inject`."""
    name, where = split(key)
    if name == "norm_on_query_only":
        with _query_only(ref):
            yield ref
        return
    target = ref
    if where is not None:
        sub = getattr(ref, SUB_LAYERS[where], None)
        if sub is None:
            raise ValueError(f"no {SUB_LAYERS[where]} in {type(ref).__name__}")
        target = sub
    with pitfalls.inject(target, name, **params_of(key)):
        yield ref


@contextmanager
def _query_only(ref: nn.Module) -> Iterator[None]:
    attn, an = getattr(ref, "attn", None), getattr(ref, "attn_add_norm", None)
    if attn is None or an is None or getattr(an, "placement", None) != "pre":
        raise ValueError("norm_on_query_only needs a Pre-Norm block")
    seen: dict[str, Any] = {}
    hook = ref.register_forward_pre_hook(lambda _m, args: seen.__setitem__("x", args[0]) if args else None)
    original = attn._project
    attn._project = lambda h, source: original(h, seen.get("x", source))  # keys and values from the raw x
    try:
        yield
    finally:
        del attn._project
        hook.remove()
