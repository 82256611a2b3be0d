"""Names for every dimension the recorder sees: from the probe's sizes, and from where each axis came from.

The probe sizes are all different (``B=2, T=7, H=5, Dh=4, D=20``), so a size alone often names an axis; where
two names share a size (``d_model=16, heads=4``: ``H == Dh``) or a size is the learner's own (``F``), the names
follow the data: a transpose permutes names, a view splits or joins them, a matmul takes the rows of its first
operand and the columns of its second, an einsum follows its letters.

A ``view``/``reshape`` is read as groups of axes whose sizes multiply to the same number. One axis split into
several (``D`` → ``H, Dh``) or several joined into one (``H, Dh`` → ``D``) is the post's split and merge; a group
with several axes on both sides (``T, D`` → ``H, T, Dh``) moves numbers between positions and heads: that is the
"reshape without transpose" the post warns about (§2.2), and :func:`reshape_dims` says so.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from itertools import combinations

Dims = tuple[str, ...]


class SizeNames:
    """size → name for the probe's named sizes (``{"B": 2, "T": 7, ...}``), with products like ``3*D``."""

    def __init__(self, sizes: dict[str, int]):
        self.sizes = dict(sizes)
        self.by_size: dict[int, list[str]] = {}
        for name, n in sizes.items():
            self.by_size.setdefault(n, []).append(name)
        d = sizes.get("D")
        self.extra: dict[int, str] = {}
        if d:
            for k in (2, 3, 4):
                self.extra.setdefault(k * d, f"{k}*D")
        for (a, na), (b, nb) in combinations([(k, v) for k, v in sizes.items() if k not in ("B",)], 2):
            self.extra.setdefault(na * nb, f"{a}*{b}")

    def name(self, n: int) -> str:
        if n == 1:
            return "1"
        names = self.by_size.get(n)
        if names:
            return names[0] if len(names) == 1 else "|".join(names)
        return self.extra.get(n, str(n))

    def ambiguous(self) -> list[str]:
        return ["=".join(v) for v in self.by_size.values() if len(v) > 1]


def by_size(shape: Sequence[int], names: SizeNames) -> Dims:
    return tuple(names.name(int(n)) for n in shape)


def broadcast_dims(out_shape: Sequence[int], operands: list[tuple[tuple[int, ...], Dims]], names: SizeNames) -> Dims:
    """Elementwise ops: each output axis takes the name of an operand axis of the same size (aligned from the
    right), the first operand first."""
    out = list(by_size(out_shape, names))
    n = len(out_shape)
    for i in range(n):
        for shape, dims in operands:
            j = i - (n - len(shape))
            if 0 <= j < len(shape) and shape[j] == out_shape[i] and (shape[j] != 1 or out_shape[i] == 1):
                out[i] = dims[j]
                break
    return tuple(out)


def permute(dims: Dims, order: Sequence[int]) -> Dims:
    return tuple(dims[i] for i in order)


def _groups(a: list[int], b: list[int]) -> list[tuple[list[int], list[int]]] | None:
    """Axes of ``a`` and ``b`` grouped where their sizes multiply to the same number (size-1 axes on their own)."""
    i = j = 0
    groups: list[tuple[list[int], list[int]]] = []
    while i < len(a) or j < len(b):
        if i < len(a) and a[i] == 1 and (j >= len(b) or b[j] != 1):
            groups.append(([i], []))
            i += 1
            continue
        if j < len(b) and b[j] == 1 and (i >= len(a) or a[i] != 1):
            groups.append(([], [j]))
            j += 1
            continue
        if i >= len(a) or j >= len(b):
            return None
        ga, gb, pa, pb = [i], [j], a[i], b[j]
        i, j = i + 1, j + 1
        while pa != pb:
            if pa < pb:
                if i >= len(a):
                    return None
                ga.append(i)
                pa *= a[i]
                i += 1
            else:
                if j >= len(b):
                    return None
                gb.append(j)
                pb *= b[j]
                j += 1
        groups.append((ga, gb))
    return groups


FEATURES = ("H", "Hkv", "Dh", "D", "F")


def _split_names(label: str, sizes: list[int], names: SizeNames) -> list[str]:
    """One axis named ``label`` split into axes of ``sizes``: ``D`` → ``H, Dh``; ``3*D`` → ``3, D`` or ``3, H, Dh``.
    A feature axis splits into feature names only (a rotate-half ``(2, Dh/2)`` is not the batch)."""
    feature = label in FEATURES or label.endswith(("*D", "*Dh", "*F"))
    out = [names.name(n) if not feature or names.name(n) in FEATURES else str(n) for n in sizes]
    m = re.fullmatch(r"(\d+)\*D", label)
    if m and sizes and sizes[0] == int(m.group(1)) and len(sizes) > 1:  # (3, ...) of a fused q|k|v
        rest = _split_names("D", sizes[1:], names) if len(sizes) > 2 else [names.name(sizes[1])]
        return [m.group(1), *rest]
    if label == "D" and len(sizes) == 2 and names.sizes.get("H") and sizes[0] * sizes[1] == names.sizes.get("D"):
        h = names.sizes["H"]
        if sizes == [h, sizes[1]]:
            out = ["H", "Dh"] if sizes[1] == names.sizes.get("Dh") else ["H", names.name(sizes[1])]
        elif sizes[1] == h:
            out = [names.name(sizes[0]) if sizes[0] != names.sizes.get("Dh") else "Dh", "H"]
    if label in ("B*H", "H*B"):
        parts = label.split("*")
        if [names.sizes.get(p) for p in parts] == sizes:
            out = parts
    return out


def _join_names(labels: list[str], names: SizeNames, size: int) -> str:
    labels = [x for x in labels if x != "1"]
    if labels == ["H", "Dh"] and size == names.sizes.get("D"):
        return "D"
    if len(labels) == 1:
        return labels[0]
    return "*".join(labels) if labels else "1"


def reshape_dims(
    in_shape: Sequence[int], in_dims: Dims, out_shape: Sequence[int], names: SizeNames
) -> tuple[Dims, str]:
    """Names of a view's output axes, and a note when the view mixes axes ("" when it only splits or joins)."""
    groups = _groups(list(in_shape), list(out_shape))
    if groups is None:
        return by_size(out_shape, names), ""
    out = list(by_size(out_shape, names))
    note = ""
    for ga, gb in groups:
        if not gb:
            continue
        if len(ga) == 1 and len(gb) == 1:
            out[gb[0]] = in_dims[ga[0]]
        elif len(ga) == 1:
            for k, name in zip(gb, _split_names(in_dims[ga[0]], [out_shape[k] for k in gb], names)):
                out[k] = name
        elif len(gb) == 1:
            out[gb[0]] = _join_names([in_dims[k] for k in ga], names, out_shape[gb[0]])
        elif len(ga) == 0:
            out[gb[0]] = "1"
        else:
            joined = [in_dims[k] for k in ga if in_dims[k] != "1"]
            made = [out[k] for k in gb if out[k] != "1"]
            if sorted(joined) != sorted(made) or joined != made:
                note = (
                    f"axes ({', '.join(joined)}) become ({', '.join(made)}) in one view: numbers move between "
                    "axes instead of axes moving (a transpose is missing)"
                )
            for k, n in zip(gb, made if len(made) == len(gb) else [out[k] for k in gb]):
                out[k] = n
    return tuple(out), note


def matmul_dims(
    a: Dims, b: Dims, a_shape: Sequence[int], b_shape: Sequence[int], out_shape: Sequence[int], names: SizeNames
) -> Dims:
    if len(a_shape) < 2 or len(b_shape) < 2 or len(out_shape) < 2:
        return by_size(out_shape, names)
    batch = broadcast_dims(out_shape[:-2], [(tuple(a_shape[:-2]), a[:-2]), (tuple(b_shape[:-2]), b[:-2])], names)
    rows, cols = a[-2], b[-1]
    if rows == cols == "T":
        cols = "S"
    return (*batch, rows, cols)


def einsum_dims(
    equation: str, operands: list[tuple[tuple[int, ...], Dims]], out_shape: Sequence[int], names: SizeNames
) -> Dims:
    eq = equation.replace(" ", "")
    if "..." in eq or "->" not in eq:
        return by_size(out_shape, names)
    ins, out = eq.split("->")
    letter: dict[str, str] = {}
    for spec, (_shape, dims) in zip(ins.split(","), operands):
        for ch, d in zip(spec, dims):
            letter.setdefault(ch, d)
    res = [letter.get(ch, names.name(n)) for ch, n in zip(out, out_shape)]
    if len(res) >= 2 and res[-2] == res[-1] == "T":
        res[-1] = "S"
    return tuple(res)


def letters(dims: Dims) -> str:
    """``("B", "H", "T", "S")`` → ``"(B, H, T, S)"``."""
    return "(" + ", ".join(dims) + ")"


def parse(text: str) -> Dims:
    return tuple(x for x in re.split(r"[\s,()]+", text) if x)
