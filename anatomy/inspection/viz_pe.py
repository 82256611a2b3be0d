"""The positional-encoding pictures: for each scheme the table, a few dimensions as waves, similarity against
the relative offset, and what happens past the training length (computed in ``pe_views.py``), drawn 2 × 2."""

from __future__ import annotations

import textwrap
from typing import TYPE_CHECKING

import torch

from anatomy.inspection.figures import _fonts, bi, new_figure
from anatomy.inspection.pe_views import BUILDERS, PEData

if TYPE_CHECKING:
    from matplotlib.figure import Figure

PE_KINDS = tuple(BUILDERS)  # sinusoidal, learned, rope, alibi, t5


def check_pe_args(kind: str, d_model: int, max_len: int, train_len: int, n_heads: int) -> None:
    if kind not in PE_KINDS:
        raise ValueError(f"--kind must be one of {', '.join(PE_KINDS)}, got {kind!r}")
    for name, value, low in (
        ("--d-model", d_model, 4),
        ("--max-len", max_len, 4),
        ("--train-len", train_len, 2),
        ("--heads", n_heads, 1),
    ):
        if not isinstance(value, int) or value < low:
            raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    if d_model % 2:
        raise ValueError(f"--d-model must be even (sin/cos and rotation pairs), got {d_model}")
    if d_model > 1024 or max_len > 4096:
        raise ValueError(f"--d-model <= 1024 and --max-len <= 4096 keep the picture readable, got {d_model}, {max_len}")
    if n_heads > 64:  # --heads 10**22 once ran on for ALiBi and ended in a C++ error for T5
        raise ValueError(f"--heads <= 64 keeps the picture readable, got {n_heads}")
    if train_len >= max_len:
        raise ValueError(
            f"--train-len must be smaller than --max-len={max_len} to show what happens past it, got {train_len}"
        )


def positional_data(
    kind: str, *, d_model: int = 64, max_len: int = 128, train_len: int = 64, n_heads: int = 8, seed: int = 0
) -> PEData:
    """Four computed views of one positional scheme: table, waves, similarity vs offset, past ``train_len``."""
    check_pe_args(kind, d_model, max_len, train_len, n_heads)
    pos = torch.arange(max_len)
    half = max_len // 2
    offsets = torch.arange(-half + 1, half)  # keys relative to the query
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return BUILDERS[kind](
            pos=pos, offsets=offsets, d=d_model, max_len=max_len, train_len=train_len, n_heads=n_heads
        )


def positional_figure(data: PEData) -> Figure:
    """Heatmap, waves, similarity vs offset and behaviour past the training length, in one 2 × 2 figure."""
    import matplotlib as mpl

    with _fonts():
        fig = new_figure(figsize=(13, 9), layout="constrained")
        axes = fig.subplots(2, 2)
        for ax, panel in zip(axes.flat, data.panels()):
            ax.set_title(bi(*panel.title), fontsize=10)
            ax.set_xlabel(panel.xlabel)
            ax.set_ylabel(panel.ylabel)
            if panel.image is not None:
                cmap = mpl.colormaps["RdBu_r"].with_extremes(bad="#dddddd")
                img = torch.tensor(panel.image, dtype=torch.float64)
                lim = float(img[img.isfinite()].abs().max()) if img.isfinite().any() else 1.0
                vmin = -lim if float(img[img.isfinite()].min()) < 0 else 0.0
                im = ax.imshow(
                    img.numpy(),
                    aspect="auto",
                    cmap=cmap if vmin < 0 else "viridis",
                    vmin=vmin,
                    vmax=lim,
                    interpolation="nearest",
                )
                fig.colorbar(im, ax=ax, shrink=0.85)
                if panel.hline is not None:
                    ax.axhline(panel.hline, color="k", lw=1, ls="--")
                    ax.text(
                        0.01,
                        panel.hline,
                        "training length",
                        va="bottom",
                        fontsize=7,
                        color="k",
                        transform=ax.get_yaxis_transform(),
                        bbox={"facecolor": "white", "alpha": 0.8, "lw": 0},
                    )
            else:
                for label, ys in panel.series:
                    ax.plot(panel.x, ys, lw=1.3, label=label)
                ax.legend(fontsize=7, loc="best")
                ax.grid(alpha=0.3)
                if panel.vline is not None:
                    ax.axvline(panel.vline, color="k", lw=1, ls="--")
                    ax.axvspan(panel.vline, max(panel.x), color="#f4d6d6", alpha=0.4, lw=0)
            if panel.note:  # under the axis label, where it hides no data
                ax.set_xlabel(f"{panel.xlabel}\n{textwrap.fill(panel.note, 90)}", fontsize=9)
        fig.suptitle(bi(*data.title), fontsize=13)
        fig.text(0.0, -0.01, data.note + "  ·  shaded: past the training length", fontsize=8, va="top", color="#444")
    return fig
