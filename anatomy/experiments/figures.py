"""One figure helper for every experiment: matplotlib (Agg) into a PNG, one axis or a grid of them."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any


def figure(
    path: str | os.PathLike[str] | None,
    draw: Callable[[Any], None],
    *,
    grid: tuple[int, int] | None = None,
    size: tuple[float, float] | None = None,
    sharey: bool = False,
) -> None:
    """Draw into ``path`` with matplotlib (Agg) if a path is given and matplotlib is installed.

    Without ``grid``, ``draw(ax)`` gets one axis (default size 6 × 4 inches); with ``grid=(rows, cols)`` it gets the
    axes as a flat list, row by row (default size 10 × 4)."""
    if path is None:
        return
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # the [viz] extra is not installed: the experiment still records its numbers
        return
    if grid is None:
        fig, ax = plt.subplots(figsize=size or (6, 4))
        draw(ax)
    else:
        fig, axes = plt.subplots(*grid, figsize=size or (10, 4), sharey=sharey, squeeze=False)
        draw([ax for row in axes for ax in row])
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def heatmap(ax: Any, values: Any, *, label_above: float) -> None:
    """``values`` (rows × columns, shares in [0, 1]) as an image with its colour bar; each cell above
    ``label_above`` is labelled with its value (white on dark cells, black on light ones)."""
    import numpy as np

    im = ax.imshow(values, vmin=0, vmax=1, cmap="viridis", aspect="auto")
    for (i, j), v in np.ndenumerate(values):
        if v > label_above:
            ax.text(j, i, f"{v:.2f}", ha="center", va="center", color="w" if v < 0.6 else "k", fontsize=7)
    ax.figure.colorbar(im, ax=ax, fraction=0.046)
