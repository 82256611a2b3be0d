"""How the heads sit in the learner's projections: the chunks of a fused q/k/v matrix (``q|k|v`` or per head, and
the grouped-query layouts), how many key/value heads a k/v width means, and the orders in which query heads can
share key/value heads or split their features (:func:`_groups`, :func:`interleaved`). Each is read into the
reference's ``q_proj/k_proj/v_proj/o_proj`` by a :class:`Source` (``naming.py``)."""

from __future__ import annotations

from typing import cast

import torch

from anatomy.doctor.mapping.naming import Hypothesis, Reader, Source, _p


def _rows(d: int, h: int, layout: str, chunk: int) -> torch.Tensor:
    """Row indices of chunk ``chunk`` (0=q, 1=k, 2=v) in a fused ``(3D, D)`` projection."""
    dh = d // h
    if layout == "q|k|v":
        return torch.arange(chunk * d, (chunk + 1) * d)
    heads = torch.arange(h)[:, None] * 3 * dh + chunk * dh + torch.arange(dh)[None]  # (H, Dh)
    return heads.reshape(-1)


def kv_dims(d: int, h: int) -> dict[int, int]:
    """Output width of a k/v projection → key/value heads, for every ``Hkv`` that divides ``H`` (``Hkv * Dh``)."""
    dh = d // h
    return {kv * dh: kv for kv in range(1, h + 1) if h % kv == 0}


def kv_heads(hyp: Hypothesis, params: dict[str, torch.Tensor], d: int, h: int) -> int:
    """Key/value heads of the reference that reads ``hyp``: from the size of what feeds ``k_proj.weight``."""
    src = hyp.sources.get("k_proj.weight") or hyp.sources.get("attn.k_proj.weight")
    if src is None:
        return h
    try:
        n = src.fn(params).numel()
    except (KeyError, IndexError, RuntimeError):
        return h
    return kv_dims(d, h).get(n // d, h) if n % d == 0 else h


def _groups(d: int, h: int, kv: int) -> list[tuple[str, torch.Tensor | None, list[int] | None]]:
    """Ways query heads can share ``kv`` key/value heads: ours (consecutive query heads share one, no change), and,
    when it differs, tiled (head ``i`` uses ``i mod kv``): the query rows to take in our head order, and that
    order (our head j is the learner's head ``heads[j]``)."""
    if kv in (1, h):
        return [("", None, None)]
    r, dh = h // kv, d // h
    heads = [(j % r) * kv + j // r for j in range(h)]
    rows = torch.cat([torch.arange(p * dh, (p + 1) * dh) for p in heads])
    return [("", None, None), (f", tiled: query head i uses key/value head i mod {kv}", rows, heads)]


def _regroup(src: dict[str, Source], rows: torch.Tensor | None) -> dict[str, Source]:
    """Reorder the query heads of a hypothesis (rows of q_proj, columns of o_proj) to our grouping."""
    if rows is None:
        return src
    out = dict(src)
    for key, f in (
        ("q_proj.weight", lambda t: t[rows]),
        ("q_proj.bias", lambda t: t[rows]),
        ("o_proj.weight", lambda t: t[:, rows]),
    ):
        s = src.get(key)
        if s is not None:
            out[key] = Source(
                s.user,
                (s.note + ", " if s.note else "") + "heads regrouped",
                cast(Reader, lambda params, g=s.fn, f=f: f(g(params))),
            )
    return out


def _gqa_style(kv: int, h: int) -> str:
    if kv == h:
        return ""
    return "multi-query attention, 1 key/value head" if kv == 1 else f"grouped-query attention, {kv} key/value heads"


def _fused(d: int, h: int, weight: str, bias: str | None, *, transpose: bool) -> list[tuple[str, dict[str, Source]]]:
    """Fused q/k/v weight (``(3D, D)`` Linear-style, or ``(D, 3D)`` used as ``x @ W``) → two chunk layouts."""
    hyps = []
    for layout in ("q|k|v", "per head"):
        src = {}
        for c, key in enumerate(("q_proj", "k_proj", "v_proj")):
            idx = _rows(d, h, layout, c)
            if transpose:
                src[f"{key}.weight"] = _p(weight, lambda t, idx=idx: t[:, idx].T, f"columns {layout} #{c}, transposed")
            else:
                src[f"{key}.weight"] = _p(weight, lambda t, idx=idx: t[idx], f"rows {layout} #{c}")
            if bias is not None:
                src[f"{key}.bias"] = _p(bias, lambda t, idx=idx: t.reshape(-1)[idx], f"{layout} #{c}")
        hyps.append((layout, src))
    return hyps


def _fused_gqa(d: int, h: int, kv: int, weight: str, bias: str | None) -> dict[str, Source]:
    """A fused ``(D + 2 Hkv Dh, D)`` projection, rows ``q | k | v`` (our own ``fused_qkv`` layout)."""
    kv_dim = kv * (d // h)
    spans = {"q_proj": (0, d), "k_proj": (d, d + kv_dim), "v_proj": (d + kv_dim, d + 2 * kv_dim)}
    src = {}
    for key, (a, b) in spans.items():
        src[f"{key}.weight"] = _p(weight, lambda t, a=a, b=b: t[a:b], f"rows {a}:{b}")
        if bias is not None:
            src[f"{key}.bias"] = _p(bias, lambda t, a=a, b=b: t[a:b], f"{a}:{b}")
    return src


def _fused_gqa_grouped(d: int, h: int, kv: int, weight: str, bias: str | None) -> dict[str, Source]:
    """A fused ``(D + 2 Hkv Dh, D)`` projection interleaved per key/value group (Falcon-40B's
    ``new_decoder_architecture``): for each group its ``H/Hkv`` query heads, then its key head, then its value head."""
    dh, g = d // h, h // kv
    block = (g + 2) * dh
    starts = torch.arange(kv) * block
    idx = {
        "q_proj": (starts[:, None] + torch.arange(g * dh)).reshape(-1),
        "k_proj": (starts[:, None] + g * dh + torch.arange(dh)).reshape(-1),
        "v_proj": (starts[:, None] + (g + 1) * dh + torch.arange(dh)).reshape(-1),
    }
    src = {}
    for key, rows in idx.items():
        src[f"{key}.weight"] = _p(weight, lambda t, rows=rows: t[rows], "rows per key/value group")
        if bias is not None:
            src[f"{key}.bias"] = _p(bias, lambda t, rows=rows: t[rows], "per key/value group")
    return src


def interleaved(d: int, h: int) -> torch.Tensor:
    """Rows of a projection whose heads are split as ``(Dh, H)`` (``view(B, T, Dh, H)``, einops
    ``(hidden heads)``): our row ``j * Dh + c`` (head j, feature c) is the learner's row ``c * H + j``."""
    dh = d // h
    return (torch.arange(dh)[None, :] * h + torch.arange(h)[:, None]).reshape(-1)


def interleave(src: dict[str, Source], rows: torch.Tensor, keys: tuple[str, ...]) -> dict[str, Source]:
    """The hypothesis ``src`` with the output rows of ``keys`` (``q_proj``, and ``k_proj``/``v_proj`` when they have
    every head) read through ``rows`` (:func:`interleaved`); the output projection keeps its columns (the heads are
    merged back head-major)."""
    out = dict(src)
    for key in keys:
        for part in ("weight", "bias"):
            s = src.get(f"{key}.{part}")
            if s is not None:
                out[f"{key}.{part}"] = Source(
                    s.user,
                    (s.note + ", " if s.note else "") + "heads split interleaved",
                    cast(Reader, lambda params, g=s.fn: g(params)[rows]),
                )
    return out
