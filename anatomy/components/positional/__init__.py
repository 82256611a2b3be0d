"""The positional-encoding catalogue of the post's §3, one file per scheme, resolved by name."""

from __future__ import annotations

from anatomy.components.positional.alibi import ALiBiPositional, alibi_slopes
from anatomy.components.positional.base import NoPositional, PositionalScheme, relative_distance
from anatomy.components.positional.learned import LearnedPositional
from anatomy.components.positional.relative import ShawRelativePositional
from anatomy.components.positional.rope import (
    ROPE_LAYOUTS,
    ROPE_SCALINGS,
    RopeScaling,
    RotaryPositional,
    apply_rope,
    rope_angles,
)
from anatomy.components.positional.sinusoidal import SinusoidalPositional, sinusoidal_table
from anatomy.components.positional.t5_bias import T5RelativeBias, t5_bucket

POSITIONAL: dict[str, type[PositionalScheme]] = {
    "none": NoPositional,
    "sinusoidal": SinusoidalPositional,
    "learned": LearnedPositional,
    "shaw": ShawRelativePositional,
    "t5": T5RelativeBias,
    "rope": RotaryPositional,
    "alibi": ALiBiPositional,
}


def positional_class(name: str) -> type[PositionalScheme]:
    if name not in POSITIONAL:
        raise ValueError(f"unknown positional {name!r}; valid names: {', '.join(sorted(POSITIONAL))}")
    return POSITIONAL[name]


__all__ = [
    "POSITIONAL",
    "ROPE_LAYOUTS",
    "ROPE_SCALINGS",
    "ALiBiPositional",
    "LearnedPositional",
    "NoPositional",
    "PositionalScheme",
    "RopeScaling",
    "RotaryPositional",
    "ShawRelativePositional",
    "SinusoidalPositional",
    "T5RelativeBias",
    "alibi_slopes",
    "apply_rope",
    "positional_class",
    "relative_distance",
    "rope_angles",
    "sinusoidal_table",
    "t5_bucket",
]
