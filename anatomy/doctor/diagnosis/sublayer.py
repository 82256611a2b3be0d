"""Faults the doctor switches on in one sub-layer of the reference block, and the one it adds to the bug zoo.

The bug zoo's block faults (``anatomy.pitfalls``) act on every ``AddNorm`` of a model. A learner often gets one
sub-layer right and the other wrong (the residual missing around attention only; ``x = norm(x)`` in the FFN
sub-layer only), so the diagnosis also tries each of them on one sub-layer: ``"no_residual@attn"`` is
``no_residual`` switched on in the reference's ``attn_add_norm`` alone. ``norm_on_query_only`` is a Pre-Norm
block whose attention gets the normalised stream as its queries but the raw stream as keys and values
(``x + attn(norm(x), x, x)``); the bug zoo has no such fault, so its explanation lives here.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from torch import nn

from anatomy import pitfalls

SUB_LAYERS = {"attn": "attn_add_norm", "ffn": "ffn_add_norm"}
PER_SUB_LAYER = ("no_residual", "norm_on_residual_path")
LOCAL_FAULTS = ("norm_on_query_only",)

LOCAL = {  # the doctor's own faults: (severity, section, summary en, summary zh, where it hides)
    "norm_on_query_only": (
        "error",
        "§5.2",
        "Pre-Norm given to the query only: attention reads norm(x) as its queries but the raw stream x as keys "
        "and values, so keys and values are not normalised.",
        "Pre-Norm 只作用在 query 上：注意力的 query 来自 norm(x)，key 和 value 却来自未归一化的 x。",
        "`x + self.attn(self.norm(x), x, x)` instead of `h = self.norm(x); x + self.attn(h, h, h)`",
    ),
}
TITLES = {"norm_on_query_only": ("pre-norm applied to the query only", "Pre-Norm 只作用在 query 上")}


def split(key: str) -> tuple[str, str | None]:
    """``"no_residual@attn"`` → ``("no_residual", "attn")``; ``"no_scaling"`` → ``("no_scaling", None)``."""
    name, _, where = key.partition("@")
    return name, where or None


def severity(name: str) -> str:
    return LOCAL[name][0] if name in LOCAL else pitfalls.FAULTS[name].severity


def block_fault_keys() -> list[str]:
    return [f"{n}@{w}" for n in PER_SUB_LAYER for w in SUB_LAYERS] + list(LOCAL_FAULTS)


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
    with pitfalls.inject(target, name):
        yield ref


@contextmanager
def _query_only(ref: nn.Module) -> Iterator[None]:
    attn, an = getattr(ref, "attn", None), getattr(ref, "attn_add_norm", None)
    if attn is None or an is None or getattr(an, "placement", None) != "pre":
        raise ValueError("norm_on_query_only needs a Pre-Norm block")
    seen: dict = {}
    hook = ref.register_forward_pre_hook(lambda _m, args: seen.__setitem__("x", args[0]) if args else None)
    original = attn._project
    attn._project = lambda h, source: original(h, seen.get("x", source))  # keys and values from the raw x
    try:
        yield
    finally:
        del attn._project
        hook.remove()
