"""Modules written for images: attention over feature maps ``(B, C, H, W)`` (SAGAN's ``Self_Attn``, a diffusion
U-Net's ``AttentionBlock``) rather than over a sequence ``(B, T, D)``. The doctor feeds every module ``(B, T, D)``;
when such a module fails on it, the learner is told what the doctor expected in one line, instead of the shape
error that the reshape inside the module raised."""

from __future__ import annotations

import inspect
import re

from torch import nn

__anatomy_transparent__ = True

SPATIAL = (
    nn.Conv2d,
    nn.ConvTranspose2d,
    nn.Conv3d,
    nn.BatchNorm2d,
    nn.InstanceNorm2d,
    nn.MaxPool2d,
    nn.AvgPool2d,
    nn.AdaptiveAvgPool2d,
    nn.Upsample,
)


def feature_maps(module: nn.Module) -> str | None:
    """Why ``module`` reads as a module over channel-first feature maps (None: nothing says so): a 2-D
    convolution, norm or pooling inside it, or a forward that unpacks its input's shape into four sizes
    (``b, c, h, w = x.shape``) or into channels and spatial sizes (``b, c, *spatial = x.shape``)."""
    for name, m in module.named_modules():
        if isinstance(m, SPATIAL):
            return f"it holds {type(m).__name__} {name}" if name else f"it is a {type(m).__name__}"
    forward = getattr(type(module), "forward", None)
    if forward is None:
        return None
    try:
        params = [p for p in inspect.signature(forward).parameters if p != "self"]
    except (TypeError, ValueError):
        return None
    source = "\n".join(_sources(type(module)))
    if not params:
        return None
    x = re.escape(params[0])
    size = rf"{x}\s*\.\s*(?:shape|size\s*\(\s*\))"
    if re.search(rf"^\s*\w+\s*,\s*\w+\s*,\s*\w+\s*,\s*\w+\s*,?\s*=\s*{size}", source, re.M):
        return f"its forward unpacks {params[0]}'s shape into four sizes (B, C, H, W)"
    if re.search(rf"^\s*\w+\s*,\s*\w+\s*,\s*\*\s*\w+\s*=\s*{size}", source, re.M):
        return f"its forward unpacks {params[0]}'s shape as (B, C, *spatial)"
    return None


def _sources(cls: type) -> list[str]:
    """The source of every function the class defines: a forward may hand x to a helper (guided-diffusion's
    ``checkpoint(self._forward, (x,), ...)``). Read function by function (a class's own source is looked up through
    ``sys.modules``, which no longer holds the learner's file)."""
    out = []
    for value in vars(cls).values():
        if inspect.isfunction(value):
            try:
                out.append(inspect.getsource(value))
            except (OSError, TypeError):
                continue
    return out


def refusal(label: str, why: str, shape: tuple[int, ...], error: str) -> str:
    """The one line said when a feature-map module fails on the doctor's ``(B, T, D)`` input."""
    return (
        f"{label} works on feature maps (B, C, H, W) ({why}), not on a sequence (B, T, D): forward(x) on x of shape "
        f"{shape} raised {error}; the doctor checks attention over a sequence of T tokens of width D -- to check "
        "this block, pass --factory a wrapper that calls it on x.transpose(1, 2).reshape(B, D, H, W) and returns "
        "its output as out.flatten(2).transpose(1, 2)"
    )
