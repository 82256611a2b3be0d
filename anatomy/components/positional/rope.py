"""Rotary positional embedding, RoPE (Su et al. 2021, "RoFormer").

Each pair of dimensions of q and k is rotated by an angle proportional to the position::

    theta_i = base^(-2i / Dh),   (x_a, x_b) -> (x_a cos(p theta_i) - x_b sin(p theta_i),
                                               x_a sin(p theta_i) + x_b cos(p theta_i))

A rotation by ``p`` on q and by ``s`` on k leaves ``q . k`` depending only on ``s - p``: relative position
through absolute rotations (the "rotation" idea the post sees in sinusoidal PE, applied inside attention).

Two layouts pair the dimensions differently and are both in the wild:
``"half"``         dimension ``i`` pairs with ``i + Dh/2`` (Hugging Face Llama, GPT-NeoX);
``"interleaved"``  dimension ``2i`` pairs with ``2i + 1`` (Meta's original Llama, GPT-J, RoFormer).
A checkpoint trained in one layout works in the other after permuting the q/k projection rows
(``anatomy.interop`` does it). Angles are computed in float32 whatever the activation dtype.

Partial rotary (GPT-NeoX's ``rotary_pct``, Phi's ``partial_rotary_factor``): ``rotary_dim < Dh`` rotates only the
first ``rotary_dim`` dimensions of each head (in the chosen layout, with frequencies over ``rotary_dim``); the rest
pass through unchanged and carry no position.

Context extension (``scaling``, a :class:`RopeScaling`): the frequencies of a model trained on
``original_max_len`` positions are stretched so that longer inputs stay in the angle range it has seen. Each kind is
a named entry of ``ROPE_SCALINGS`` and follows Hugging Face's ``modeling_rope_utils`` formulas (float32 tables):

``"linear"``   position interpolation (kaiokendev; Chen et al. 2023): every ``theta_i / factor``.
``"dynamic"``  dynamic NTK (bloc97, emozilla): the base grows with the call's length ``L = max(position) + 1``,
               ``base * (factor * L / max_len - (factor - 1)) ** (d / (d - 2))``, only once ``L > max_len``; up
               to ``max_len`` the plain table. The table of a call depends only on that call's positions (Hugging
               Face's module also remembers the longest length it has seen until it comes back under
               ``max_len``: the same tables within one generation, not after a long call followed by a shorter one).
``"llama3"``   Llama 3.1: wavelengths longer than ``original_max_len / low_freq_factor`` are divided by
               ``factor``, shorter than ``original_max_len / high_freq_factor`` are kept, those between are blended.
``"yarn"``     YaRN (Peng et al. 2023): a ramp between interpolation (``/ factor``) and extrapolation over the
               dimensions whose rotations at ``original_max_len`` fall between ``beta_slow`` and ``beta_fast``, and
               cos/sin multiplied by ``attention_factor`` (default ``0.1 ln(factor) + 1``): q.k scaled by its square.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

import torch

from anatomy.components.positional.base import PositionalScheme
from anatomy.shapes import compute_dtype

if TYPE_CHECKING:
    from anatomy.components.context import AttentionContext

ROPE_LAYOUTS = ("half", "interleaved")


def rope_angles(
    positions: torch.Tensor, head_dim: int, base: float, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """``(B|1, T)`` → ``(B|1, 1, T, Dh/2)`` angles ``p * theta_i`` (float32, or float64 for float64 inputs)."""
    inv_freq = base ** (-torch.arange(0, head_dim, 2, dtype=dtype, device=positions.device) / head_dim)
    return (positions.to(dtype)[..., None] * inv_freq)[:, None]  # (B|1, 1, T, Dh/2)


def rope_cos_sin(angles: torch.Tensor, scale: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """``angles (B|1, 1, T, R/2)`` → ``(cos, sin)`` of the same shape, each multiplied by ``scale`` (YaRN)."""
    cos, sin = angles.cos(), angles.sin()
    if scale != 1.0:
        cos, sin = cos * scale, sin * scale
    return cos, sin


def rotate_half_pairs(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layout: str) -> torch.Tensor:
    """Rotate ``x: (B, H, T, Dh)`` by a table ``cos, sin: (B|1, 1, T, R/2)``; computed in the table's dtype,
    returned in x.dtype. ``R < Dh`` (partial rotary) rotates the first ``R`` dims and passes the rest through."""
    rot = 2 * cos.shape[-1]
    if rot < x.shape[-1]:
        return torch.cat([rotate_half_pairs(x[..., :rot], cos, sin, layout), x[..., rot:]], dim=-1)  # (B, H, T, Dh)
    xf = x.to(cos.dtype)
    if layout == "half":
        x1, x2 = xf.chunk(2, dim=-1)  # (B, H, T, Dh/2) each
        out = torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)  # (B, H, T, Dh)
    else:
        x1, x2 = xf[..., 0::2], xf[..., 1::2]  # (B, H, T, Dh/2) each
        out = torch.stack([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).flatten(-2)  # (B, H, T, Dh)
    return out.to(x.dtype)


def apply_rope(x: torch.Tensor, angles: torch.Tensor, layout: str, *, scale: float = 1.0) -> torch.Tensor:
    """Rotate ``x: (B, H, T, Dh)`` by ``angles: (B|1, 1, T, R/2)``; computed in float32, returned in x.dtype.

    ``R = Dh`` rotates every dimension; a smaller ``R`` (partial rotary) rotates the first ``R`` and passes the rest
    through. ``scale`` multiplies cos and sin (YaRN's attention factor)."""
    return rotate_half_pairs(x, *rope_cos_sin(angles, scale), layout)


@dataclass(frozen=True)
class RopeScaling:
    """How RoPE's frequencies are stretched for a longer context (module docstring). ``original_max_len``: the
    pretraining context of ``"llama3"``/``"yarn"`` (None: the model's ``max_seq_len``)."""

    kind: str  # a key of ROPE_SCALINGS
    factor: float = 1.0
    original_max_len: int | None = None
    low_freq_factor: float = 1.0  # llama3
    high_freq_factor: float = 4.0  # llama3
    beta_fast: float = 32.0  # yarn
    beta_slow: float = 1.0  # yarn
    attention_factor: float | None = None  # yarn; None: 0.1 * ln(factor) + 1 (1 when factor <= 1)
    truncate: bool = True  # yarn: floor/ceil the ramp's ends

    def __post_init__(self) -> None:
        if self.kind not in ROPE_SCALINGS:
            raise ValueError(f"unknown rope_scaling {self.kind!r}; valid names: {', '.join(ROPE_SCALINGS)}")
        if not self.factor >= 1.0:
            raise ValueError(f"rope_factor must be >= 1 (how many times the context is stretched), got {self.factor}")
        if self.kind == "llama3" and not self.high_freq_factor > self.low_freq_factor:
            raise ValueError(
                f"rope_high_freq_factor must be > rope_low_freq_factor for 'llama3', got "
                f"{self.high_freq_factor} and {self.low_freq_factor}"
            )

    def inv_freq(
        self, dim: int, base: float, *, max_len: int, length: int, dtype: torch.dtype, device: torch.device
    ) -> tuple[torch.Tensor, float]:
        """``(Dh/2,)`` frequencies and the cos/sin multiplier for a call whose positions end at ``length - 1``."""
        return ROPE_SCALINGS[self.kind](self, Table(dim, base, max_len, length, dtype, device))


@dataclass(frozen=True)
class Table:
    """One call's frequency table: ``dim`` rotated dims of RoPE's ``base``, the trained length ``max_len``, positions
    that end at ``length - 1``, in ``dtype`` on ``device``. Each entry of ``ROPE_SCALINGS`` maps a
    :class:`RopeScaling` and a table to ``(frequencies (dim/2,), cos/sin multiplier)``."""

    dim: int
    base: float
    max_len: int
    length: int
    dtype: torch.dtype
    device: torch.device | str | None

    def exponents(self) -> torch.Tensor:
        return torch.arange(0, self.dim, 2, dtype=torch.int64, device=self.device).to(self.dtype) / self.dim  # (Dh/2,)


def _linear(s: RopeScaling, r: Table) -> tuple[torch.Tensor, float]:
    return 1.0 / (r.base ** r.exponents()) / s.factor, 1.0


def _dynamic(s: RopeScaling, r: Table) -> tuple[torch.Tensor, float]:
    if r.length <= r.max_len:  # the trained range: the plain table
        return r.base ** -r.exponents(), 1.0
    # the grown base in the table's dtype, as Hugging Face computes it from a length tensor
    grown = r.base * ((s.factor * torch.tensor(r.length, dtype=r.dtype) / r.max_len) - (s.factor - 1)) ** (
        r.dim / (r.dim - 2)
    )
    return 1.0 / (grown.to(r.device) ** r.exponents()), 1.0


def _llama3(s: RopeScaling, r: Table) -> tuple[torch.Tensor, float]:
    inv_freq = 1.0 / (r.base ** r.exponents())
    old = s.original_max_len or r.max_len
    low_wavelen, high_wavelen = old / s.low_freq_factor, old / s.high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_wavelen, inv_freq / s.factor, inv_freq)  # long waves: interpolated
    smooth = (old / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor)
    blended = (1 - smooth) * scaled / s.factor + smooth * scaled
    medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
    return torch.where(medium, blended, scaled), 1.0


def _yarn(s: RopeScaling, r: Table) -> tuple[torch.Tensor, float]:
    old = s.original_max_len or r.max_len
    attention = s.attention_factor
    if attention is None:
        attention = 1.0 if s.factor <= 1 else 0.1 * math.log(s.factor) + 1.0

    def correction_dim(rotations: float) -> float:  # the dimension that turns `rotations` times over `old` positions
        return r.dim * math.log(old / (rotations * 2 * math.pi)) / (2 * math.log(r.base))

    low, high = correction_dim(s.beta_fast), correction_dim(s.beta_slow)
    if s.truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, r.dim - 1)
    if low == high:
        high += 0.001  # no zero-width ramp
    ramp = ((torch.arange(r.dim // 2, dtype=torch.float32) - low) / (high - low)).clamp(0, 1).to(r.device, r.dtype)
    pos_freqs = r.base ** r.exponents()
    extrapolate = 1 - ramp  # 1: keep the trained frequency (fast dims), 0: interpolate (slow dims)
    inv_freq = (1.0 / (s.factor * pos_freqs)) * (1 - extrapolate) + (1.0 / pos_freqs) * extrapolate
    return inv_freq, float(attention)


ROPE_SCALINGS: dict[str, Callable[[RopeScaling, Table], tuple[torch.Tensor, float]]] = {
    "linear": _linear,
    "dynamic": _dynamic,
    "llama3": _llama3,
    "yarn": _yarn,
}


class RotaryPositional(PositionalScheme):
    """RoPE inside attention. ``rotary_dim``: how many leading dims of each head rotate (default all, ``Dh``);
    ``scaling``: a :class:`RopeScaling` (default none); ``max_seq_len``: the trained length ``"dynamic"`` grows
    from and ``"llama3"``/``"yarn"`` default to."""

    site = "attention"

    def __init__(
        self,
        *,
        head_dim: int,
        base: float = 10000.0,
        layout: str = "half",
        rotary_dim: int | None = None,
        scaling: RopeScaling | None = None,
        max_seq_len: int = 2048,
    ) -> None:
        super().__init__()
        if head_dim % 2:
            raise ValueError(
                f"positional='rope' needs an even head dimension Dh = d_model // n_heads, got Dh={head_dim}"
            )
        if layout not in ROPE_LAYOUTS:
            raise ValueError(f"unknown rope_layout {layout!r}; valid names: {', '.join(ROPE_LAYOUTS)}")
        if base <= 1:
            raise ValueError(f"rope_base must be > 1, got {base}")
        rotary_dim = head_dim if rotary_dim is None else rotary_dim
        if not 2 <= rotary_dim <= head_dim or rotary_dim % 2:
            raise ValueError(f"rotary_dim must be an even number in [2, head_dim={head_dim}], got {rotary_dim}")
        self.head_dim, self.base, self.layout = head_dim, base, layout
        self.rotary_dim, self.scaling, self.max_seq_len = rotary_dim, scaling, max_seq_len

    def angles(
        self, positions: torch.Tensor, dtype: torch.dtype, length: int | None = None
    ) -> tuple[torch.Tensor, float]:
        """``(B|1, T)`` → ``(angles (B|1, 1, T, R/2), cos/sin multiplier)``. ``length``: the call's length (default
        ``max(positions) + 1``), read only by ``"dynamic"``."""
        if self.scaling is None:
            if self.rotary_dim == self.head_dim:
                return rope_angles(positions, self.head_dim, self.base, dtype), 1.0
            inv_freq = self.base ** (
                -torch.arange(0, self.rotary_dim, 2, dtype=dtype, device=positions.device) / self.rotary_dim
            )
            factor = 1.0
        else:
            if length is None:
                length = int(positions.max()) + 1 if self.scaling.kind == "dynamic" and positions.numel() else 0
            inv_freq, factor = self.scaling.inv_freq(
                self.rotary_dim,
                self.base,
                max_len=self.max_seq_len,
                length=length,
                dtype=dtype,
                device=positions.device,
            )
        return (positions.to(dtype)[..., None] * inv_freq)[:, None], factor  # (B|1, 1, T, R/2)

    def _length(self, q_pos: torch.Tensor) -> int | None:
        """The call's length, read only by ``"dynamic"``: one for q and k of a call (the new entries)."""
        if self.scaling is not None and self.scaling.kind == "dynamic" and q_pos.numel():
            return int(q_pos.max()) + 1
        return None

    def cos_sin(
        self, positions: torch.Tensor, dtype: torch.dtype, length: int | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The table ``(cos, sin)``, each ``(B|1, 1, T, R/2)``, for ``positions (B|1, T)``."""
        angles, scale = self.angles(positions, dtype, self._length(positions) if length is None else length)
        return rope_cos_sin(angles, scale)

    def rotate(
        self, q: torch.Tensor, k: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        dtype = compute_dtype(q.dtype)
        length = self._length(q_pos)
        q_table = self.cos_sin(q_pos, dtype, length)
        k_table = q_table if k_pos is q_pos else self.cos_sin(k_pos, dtype, length)
        return rotate_half_pairs(q, *q_table, self.layout), rotate_half_pairs(k, *k_table, self.layout)

    def rotate_for(self, ctx: AttentionContext, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Rotate with the forward's table, computed once for every layer with the same frequencies."""
        dtype = compute_dtype(q.dtype)
        key = ("rope", self.rotary_dim, self.base, self.scaling, self.max_seq_len, dtype)
        table = ctx.table(key, lambda: self.cos_sin(ctx.positions, dtype))
        cos, sin = cast(tuple[torch.Tensor, torch.Tensor], table)
        return rotate_half_pairs(q, cos, sin, self.layout), rotate_half_pairs(k, cos, sin, self.layout)

    def extra_repr(self) -> str:
        return (
            f"head_dim={self.head_dim}, base={self.base}, layout={self.layout!r}"
            + (f", rotary_dim={self.rotary_dim}" if self.rotary_dim != self.head_dim else "")
            + (f", scaling={self.scaling.kind!r}, factor={self.scaling.factor}" if self.scaling else "")
        )
