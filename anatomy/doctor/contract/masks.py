"""Masks as the doctor writes them for the learner's module: every sense (bool keep, bool ignore, additive float,
0/1 numbers) in every layout, and the discovery of which one the module takes (and whether it can take a causal
one). A candidate format must leave the output unchanged when it hides nothing and must hide what it says it hides;
the best candidate is the one whose hidden keys leak least."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from anatomy.doctor.contract import precision
from anatomy.doctor.loading.subject import CallError, CheckedModule

# --- masks ----------------------------------------------------------------------------------------------------

SENSES = ("bool_keep", "bool_ignore", "additive", "int_keep", "float_keep")
PAD_LAYOUTS = ("(B, S)", "(B, 1, 1, S)", "(B, 1, S)", "(B, 1, T, S)", "(B, T, S)")
FULL_LAYOUTS = ("(B, 1, T, S)", "(B, T, S)", "(T, S)")


def make_sense(sense: str, keep: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A boolean keep-mask (True = may attend) written in ``sense``."""
    if sense == "bool_keep":
        return keep
    if sense == "bool_ignore":
        return ~keep
    if sense == "additive":  # finfo.min, not -inf: the fill must not be the doctor's NaN
        return torch.zeros(keep.shape, dtype=dtype).masked_fill(~keep, torch.finfo(dtype).min)
    if sense == "int_keep":
        return keep.long()
    if sense == "float_keep":
        return keep.to(dtype)
    raise ValueError(f"unknown mask sense {sense!r}")


def make_layout(layout: str, keep: torch.Tensor) -> torch.Tensor | None:
    """``keep: (B, T, S)`` → the layout, or None when the layout cannot say it (a causal mask as (B, S))."""
    per_key = bool((keep == keep[:, :1]).all())
    same_batch = bool((keep == keep[:1]).all())
    if layout == "(B, S)":
        return keep[:, 0] if per_key else None  # (B, S)
    if layout == "(B, 1, 1, S)":
        return keep[:, :1, None] if per_key else None  # (B, 1, 1, S)
    if layout == "(B, 1, S)":  # the annotated transformer's src_mask
        return keep[:, :1] if per_key else None  # (B, 1, S)
    if layout == "(B, 1, T, S)":
        return keep[:, None]  # (B, 1, T, S)
    if layout == "(B, T, S)":
        return keep
    if layout == "(T, S)":
        return keep[0] if same_batch else None  # (T, S)
    raise ValueError(f"unknown mask layout {layout!r}")


@dataclass(frozen=True)
class MaskFormat:
    sense: str
    layout: str

    def make(self, keep: torch.Tensor, dtype: torch.dtype = torch.float64) -> torch.Tensor | None:
        m = make_layout(self.layout, keep)
        return None if m is None else make_sense(self.sense, m, dtype)

    def expresses(self, keep: torch.Tensor) -> bool:
        return make_layout(self.layout, keep) is not None


def pad_keep(b: int, t: int, lengths: list[int]) -> torch.Tensor:
    """``(B, T, S)`` keep-mask of right padding: row ``i`` has ``lengths[i]`` real tokens."""
    key = torch.arange(t)[None] < torch.tensor(lengths)[:, None]  # (B, S)
    return key[:, None, :].expand(b, t, t).clone()  # (B, T, S)


def padding_keep(b: int, t: int, causal: bool) -> tuple[torch.Tensor, slice]:
    """The padding every probe and the diagnosis use, one side for all: sequence 1 has two padded tokens, on the
    right, or on the left for a causal module (it never sees right padding: batched generation pads on the left).
    Returns the ``(B, T, S)`` keep-mask and the padded positions of sequence 1."""
    if not causal:
        return pad_keep(b, t, [t] + [t - 2] * (b - 1)), slice(t - 2, t)
    start = torch.tensor([0] + [2] * (b - 1))
    key = torch.arange(t)[None] >= start[:, None]  # (B, S)
    return key[:, None, :].expand(b, t, t).clone(), slice(0, 2)  # (B, T, S)


def causal_keep(b: int, t: int) -> torch.Tensor:
    return torch.ones(t, t, dtype=torch.bool).tril().expand(b, t, t).clone()  # (B, T, S)


def max_diff(a: torch.Tensor, b: torch.Tensor, rows: torch.Tensor | None = None) -> float:
    """max |a - b| over the (B, T) rows selected (all if None); NaN anywhere there counts as infinite."""
    if a.shape != b.shape:  # tensors of two layouts (a sequence-first module's insides): never equal
        return math.inf
    d = (a - b).abs()
    if rows is not None:
        d = d[rows]
    if d.numel() == 0:
        return 0.0
    if torch.isnan(d).any():
        return math.inf
    return float(d.max())


def close(a: torch.Tensor, b: torch.Tensor, rows: torch.Tensor | None = None, tol: float = 1e-9) -> bool:
    scale = max(1.0, float(b.abs().nan_to_num(0).max()) if b.numel() else 1.0)
    return max_diff(a, b, rows) <= precision.tol(tol) * scale


@dataclass
class MaskCandidate:
    fmt: MaskFormat
    ok: bool
    reason: str = ""
    effect: float = 0.0
    leak: float = math.inf
    # how far the mask moved the real query rows' outputs (0: it acts on padded rows only)
    real_effect: float = math.inf


def discover_mask(
    subject: CheckedModule, x: torch.Tensor, base: torch.Tensor, shape: tuple[int, ...]
) -> list[MaskCandidate]:
    """Try every (sense, layout) on a padding mask. A format is accepted when it is neutral while hiding nothing;
    the accepted ones come first, best first: the mask changes the output, its hidden keys leak least, then the
    order of SENSES and PAD_LAYOUTS. Rejected candidates follow, each with its reason."""
    b, t, _ = x.shape
    keep_all = torch.ones(b, t, t, dtype=torch.bool)
    keep_pad = pad_keep(b, t, [t, t - 2])
    real = keep_pad[:, 0]  # (B, T) real query rows
    x2 = x.clone()
    x2[1, t - 2 :] += torch.randn(2, x.shape[-1], generator=torch.Generator().manual_seed(7), dtype=x.dtype)
    # left padding too: a causal module's real queries never see right padding, so only keys *before* them can
    # tell a format that hides from one that merely shifts the scores (bool added to the scores)
    keep_left = torch.ones(b, t, t, dtype=torch.bool)
    keep_left[1, :, :2] = False
    real_left = torch.ones(b, t, dtype=torch.bool)
    real_left[1, :2] = False
    x3 = x.clone()
    x3[1, :2] += torch.randn(2, x.shape[-1], generator=torch.Generator().manual_seed(8), dtype=x.dtype)
    cands = []
    for layout in PAD_LAYOUTS:
        for sense in SENSES:
            fmt = MaskFormat(sense, layout)
            cand = MaskCandidate(fmt, ok=False)
            cands.append(cand)
            try:
                out_all, _ = subject.run(x, fmt.make(keep_all, x.dtype))
                if tuple(out_all.shape) != shape:
                    cand.reason = f"output shape {tuple(out_all.shape)}"
                    continue
                if not close(out_all, base):
                    cand.reason = "a mask that hides nothing changed the output"
                    continue
                out_pad, _ = subject.run(x, fmt.make(keep_pad, x.dtype))
                out_pad2, _ = subject.run(x2, fmt.make(keep_pad, x.dtype))
                out_left, _ = subject.run(x, fmt.make(keep_left, x.dtype))
                out_left2, _ = subject.run(x3, fmt.make(keep_left, x.dtype))
            except CallError as err:
                cand.reason = str(err)
                continue
            if tuple(out_pad.shape) != shape or tuple(out_pad2.shape) != shape:
                cand.reason = "output shape changed with a mask"
                continue
            cand.ok = True
            cand.effect = max_diff(out_pad.nan_to_num(1e30), base)
            cand.leak = max_diff(out_pad, out_pad2, real)
            cand.real_effect = max_diff(out_pad, base, real)
            if out_left.shape == out_left2.shape == base.shape:
                cand.leak = max(cand.leak, max_diff(out_left, out_left2, real_left))
    scale = max(1.0, float(base.abs().max()))
    order = {s: i for i, s in enumerate(SENSES)}

    def rank(c: MaskCandidate) -> tuple[bool, bool, bool, int, int]:
        floor = precision.tol(1e-9) * scale
        return (not c.ok, c.effect <= floor, c.leak > floor, order[c.fmt.sense], PAD_LAYOUTS.index(c.fmt.layout))

    return sorted(cands, key=rank)


def leaking_forms(cands: list[MaskCandidate], floor: float) -> list[MaskCandidate]:
    """The layouts whose best reading acts on the output and leaks the padding while the chosen one (``cands[0]``)
    hides it: one wrong path behind a right one (``if mask.dim() == 2: mask = mask[:, None, :, None]``). Per layout
    the best-ranked sense stands for it, so a sense the module does not take (0/1 added to the scores of a module
    that wants an additive mask) is never the one blamed."""
    best = cands[0] if cands else None
    if best is None or not best.ok or best.effect <= floor or best.leak > floor:
        return []
    out, seen = [], {best.fmt.layout}
    for c in cands[1:]:
        if c.fmt.layout in seen:
            continue
        seen.add(c.fmt.layout)
        if c.ok and c.effect > floor and c.leak > floor:
            out.append(c)
    return out


def discover_causal_format(
    subject: CheckedModule, fmt: MaskFormat, x: torch.Tensor, base: torch.Tensor, shape: tuple[int, ...]
) -> MaskFormat | None:
    """A layout (in the discovered sense) that can carry a causal mask, or None (e.g. the module takes (B, S))."""
    b, t, _ = x.shape
    layouts = [fmt.layout] if fmt.layout in FULL_LAYOUTS else []
    layouts += [lay for lay in FULL_LAYOUTS if lay not in layouts]
    keep_all, keep_causal = torch.ones(b, t, t, dtype=torch.bool), causal_keep(b, t)
    for layout in layouts:
        cand = MaskFormat(fmt.sense, layout)
        try:
            out_all, _ = subject.run(x, cand.make(keep_all, x.dtype))
            out_causal, _ = subject.run(x, cand.make(keep_causal, x.dtype))
        except CallError:
            continue
        if tuple(out_all.shape) != shape or tuple(out_causal.shape) != shape or not close(out_all, base):
            continue
        if max_diff(out_causal[:, : t - 1], base[:, : t - 1]) > precision.tol(1e-9):
            return cand
    return None


def dependency(subject: CheckedModule, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """``dep[i, j]``: how far output row ``i`` moves (max over batch and features) when token ``j`` changes."""
    base, _ = subject.run(x, mask)
    t = x.shape[1]
    dep = torch.zeros(t, t, dtype=torch.float64)
    gen = torch.Generator().manual_seed(11)
    for j in range(t):
        x2 = x.clone()
        x2[:, j] += torch.randn(x.shape[0], x.shape[-1], generator=gen, dtype=x.dtype)
        out, _ = subject.run(x2, mask)
        dep[:, j] = (out - base).abs().nan_to_num(math.inf).amax(dim=(0, 2))
    return dep
