"""The mask pictures: padding / causal / sliding-window masks with fully hidden rows marked, and a table
computed on the spot of what each fill value (-inf, finfo.min, -1e9, -1e4, a boolean mask) does to softmax."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import torch

from anatomy.components.kernels import AttentionArgs, math_attention
from anatomy.components.masks import (
    causal_mask,
    combine,
    key_padding_to_attention,
    padding_mask,
    sliding_window_mask,
)
from anatomy.inspection.figures import _fonts, bi, new_figure

if TYPE_CHECKING:
    from matplotlib.figure import Figure
    from matplotlib.patches import Rectangle

# --------------------------------------------------------------------------------------------------- masks


def mask_examples(seq: int = 8, pad: int = 3, window: int | None = None) -> dict[str, torch.Tensor]:
    """Four ``(T, S)`` masks of one padded sequence (True = may attend), built by ``components.masks``; a fifth,
    the causal sliding-window band, when ``window`` is given."""
    if not isinstance(seq, int) or not 2 <= seq <= 64:
        raise ValueError(f"--seq must be an integer in [2, 64], got {seq!r}")
    if not isinstance(pad, int) or not 1 <= pad < seq:
        raise ValueError(f"--pad must be an integer in [1, --seq={seq}), got {pad!r}")
    if window is not None and (not isinstance(window, int) or not 1 <= window <= seq):
        raise ValueError(f"--window must be an integer in [1, --seq={seq}], got {window!r}")
    right = padding_mask([seq - pad], seq)  # (1, S): real tokens first
    left = right.flip(-1)  # (1, S): padding first
    causal = causal_mask(seq)  # (T, S)

    def as_ts(key_padding: torch.Tensor) -> torch.Tensor:
        return key_padding_to_attention(key_padding)[0, 0].expand(seq, seq)  # (T, S)

    real = seq - pad
    out: dict[str, torch.Tensor | None] = {
        f"padding ({real} tokens, then {pad} pads)": as_ts(right),
        "causal": causal,
        "padding & causal": combine(as_ts(right), causal),
        f"left padding ({pad} pads first) & causal": combine(as_ts(left), causal),
    }
    if window is not None:
        out[f"sliding window {window} (causal)"] = sliding_window_mask(seq, seq, window)
    return {name: m for name, m in out.items() if m is not None}  # combine() of two masks is never None


_FILLS: tuple[tuple[str, Callable[[torch.dtype], float]], ...] = (
    ("-inf", lambda dt: float("-inf")),
    ("finfo.min", lambda dt: torch.finfo(dt).min),
    ("-1e9", lambda dt: -1e9),
    ("-1e4", lambda dt: -1e4),
)
FILL_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
FILL_COLUMNS = (
    "fill",
    "dtype",
    "stored as",
    "scores.masked_fill",
    "hidden weight",
    "hidden weight, logit 1e4",
    "fully masked row",
    "two masks added",
)
_SCORES = (2.0, 1.0, 0.5, 1.5, 3.0)  # the last two keys are hidden
_KEEP = (True, True, True, False, False)


def _describe_hidden(w: torch.Tensor, keep: torch.Tensor) -> str:
    if w.isnan().any():
        return "NaN"
    leak = float(w[~keep].float().max())
    return "0 (exact)" if leak == 0.0 else f"leak {leak:.1e}"


def _describe_row(w: torch.Tensor) -> str:
    """A row whose every key is hidden: NaN, zeros, uniform, or the unmasked softmax showing through."""
    if w.isnan().any():
        return "NaN"
    w = w.float()
    if float(w.abs().max()) == 0.0:
        return "0 (no NaN)"
    n = w.numel()
    if bool((w - 1.0 / n).abs().max() < 1e-3):
        return f"uniform 1/{n} (leak)"
    if bool((w - torch.tensor(_SCORES).softmax(-1)).abs().max() < 1e-3):
        return "softmax(scores): mask cancels"
    return "weights " + ", ".join(f"{float(v):.2g}" for v in w)


def fill_value_table() -> list[dict[str, str]]:
    """What each fill value does to softmax in each dtype, computed now (additive masks, softmax in that dtype).

    Rows: fill × dtype, then anatomy's own rule (boolean mask, -inf, empty rows → 0) for reference. Columns:
    the fill stored in the dtype (overflow shows as -inf); whether ``scores.masked_fill(~keep, fill)`` works;
    the largest weight on a hidden key of an ordinary row, and of a row whose hidden key has a raw logit near
    1e4 (large unscaled scores); a row with every key hidden; a fully hidden row when two additive masks
    (padding + causal) are summed.
    """
    keep = torch.tensor(_KEEP)
    none = torch.zeros_like(keep)
    rows = []
    for label, make in _FILLS:
        for dt in FILL_DTYPES:
            fill = make(dt)
            stored = torch.tensor(fill, dtype=dt)
            stored_text = f"{float(stored):.4g}"
            if math.isinf(float(stored)) and math.isfinite(fill):
                stored_text += " (overflow)"
            elif math.isfinite(fill) and float(stored) != fill:
                stored_text += " (rounded)"
            scores = torch.tensor(_SCORES, dtype=dt)
            try:
                scores.masked_fill(~keep, fill)
                masked_fill = "ok"
            except RuntimeError as err:
                masked_fill = "RuntimeError: overflow" if "overflow" in str(err) else f"RuntimeError: {err}"[:40]

            # 0 where kept, fill (in dt) elsewhere
            def additive(k: torch.Tensor, dt: torch.dtype = dt, fill: float = fill) -> torch.Tensor:
                return torch.where(k, torch.zeros((), dtype=dt), torch.tensor(fill, dtype=dt))

            big = torch.tensor((2.0, 1.0, 0.5, 9990.0, 1.5), dtype=dt)
            rows.append(
                {
                    "fill": label,
                    "dtype": str(dt).removeprefix("torch."),
                    "stored as": stored_text,
                    "scores.masked_fill": masked_fill,
                    "hidden weight": _describe_hidden((scores + additive(keep)).softmax(-1), keep),
                    "hidden weight, logit 1e4": _describe_hidden((big + additive(keep)).softmax(-1), keep),
                    "fully masked row": _describe_row((scores + additive(none)).softmax(-1)),
                    "two masks added": _describe_row((scores + additive(none) + additive(none)).softmax(-1)),
                }
            )
    for dt in FILL_DTYPES:  # our kernels: boolean mask, -inf, softmax in float32, empty rows zeroed

        def ours(scores: torch.Tensor, k: torch.Tensor | None, dt: torch.dtype = dt) -> torch.Tensor:
            q, key = torch.zeros(1, 1, 1, 1, dtype=dt), torch.zeros(1, 1, scores.numel(), 1, dtype=dt)
            mask = None if k is None else k[None, None, None]
            bias = scores.to(dt)[None, None, None]
            _, w = math_attention(q, key, key, AttentionArgs(mask=mask, scale=1.0, bias=bias, need_weights=True))
            assert w is not None  # need_weights=True
            return w[0, 0, 0]

        scores = torch.tensor(_SCORES, dtype=dt)
        big = torch.tensor((2.0, 1.0, 0.5, 9990.0, 1.5), dtype=dt)
        rows.append(
            {
                "fill": "anatomy: bool mask",
                "dtype": str(dt).removeprefix("torch."),
                "stored as": "-inf",
                "scores.masked_fill": "ok",
                "hidden weight": _describe_hidden(ours(scores, keep), keep),
                "hidden weight, logit 1e4": _describe_hidden(ours(big, keep), keep),
                "fully masked row": _describe_row(ours(scores, none)),
                "two masks added": _describe_row(ours(scores, combine(none, none))) + " (AND, not +)",
            }
        )
    return rows


def format_table(rows: list[dict[str, str]], columns: Sequence[str] = FILL_COLUMNS) -> str:
    widths = [max(len(c), *(len(r[c]) for r in rows)) for c in columns]
    line = "  ".join(c.ljust(w) for c, w in zip(columns, widths))
    out = [line, "-" * len(line)]
    out += ["  ".join(r[c].ljust(w) for c, w in zip(columns, widths)).rstrip() for r in rows]
    return "\n".join(out)


def mask_figure(masks: dict[str, torch.Tensor], table: list[dict[str, str]]) -> Figure:
    """The masks as grids (allowed / hidden), fully hidden rows marked, and the fill-value table below."""
    from matplotlib.colors import ListedColormap

    cmap = ListedColormap(["#e8e8e8", "#2b6cb0"])
    with _fonts():
        fig = new_figure(figsize=(17, 9.5), layout="constrained")
        grid = fig.add_gridspec(2, len(masks), height_ratios=[1, 1])
        for i, (name, mask) in enumerate(masks.items()):
            ax = fig.add_subplot(grid[0, i])
            t, s = mask.shape
            ax.imshow(mask.numpy(), cmap=cmap, vmin=0, vmax=1, interpolation="nearest")
            ax.set_xticks(range(s), [str(j) for j in range(s)], fontsize=7)
            ax.set_yticks(range(t), [str(j) for j in range(t)], fontsize=7)
            ax.set_xticks([x - 0.5 for x in range(1, s)], minor=True)
            ax.set_yticks([y - 0.5 for y in range(1, t)], minor=True)
            ax.grid(which="minor", color="white", lw=1)
            ax.tick_params(which="minor", length=0)
            ax.set_xlabel(bi("key j", "键"))
            ax.set_ylabel(bi("query i", "查询"))
            empty = (~mask.any(-1)).nonzero().flatten().tolist()
            for r in empty:
                ax.add_patch(_rect(r, s))
                ax.text(
                    s - 0.4,
                    r,
                    bi(" no key → weights 0", " 无可见键 → 0"),
                    color="#c53030",
                    fontsize=7,
                    va="center",
                    ha="left",
                    clip_on=False,
                )
            title = name + (f"\n{len(empty)} fully masked row(s)" if empty else "\n")
            ax.set_title(title, fontsize=10)
        ax = fig.add_subplot(grid[1, :])
        ax.axis("off")
        cells = [[r[c] for c in FILL_COLUMNS] for r in table]
        tab = ax.table(cellText=cells, colLabels=list(FILL_COLUMNS), loc="upper center", cellLoc="left")
        tab.auto_set_font_size(False)
        tab.set_fontsize(8)
        tab.scale(1, 1.25)
        for (row, _col), cell in tab.get_celld().items():
            text = cell.get_text().get_text()
            if row == 0:
                cell.set_facecolor("#edf2f7")
            elif text.startswith("0 (") or text == "ok":
                cell.set_facecolor("#e6f4ea")
            elif "NaN" in text or "RuntimeError" in text or "overflow" in text:
                cell.set_facecolor("#fed7d7")
            elif "leak" in text or "cancels" in text or "rounded" in text:
                cell.set_facecolor("#feebc8")
        tab.auto_set_column_width(list(range(len(FILL_COLUMNS))))
        ax.set_title(
            bi(
                "what each fill value does to softmax (computed now; additive masks, softmax in each dtype)",
                "不同填充值对 softmax 的影响（现场计算）",
            ),
            fontsize=11,
        )
        fig.suptitle(bi("Masks: True (blue) = may attend", "掩码：蓝色 = 可以关注"), fontsize=13)
        fig.text(
            0.0,
            -0.01,
            f"scores {_SCORES}, last two keys hidden; 'logit 1e4': a hidden key with raw score 9990; "
            "'two masks added': padding + causal additive masks summed on a fully hidden row (HF PR #27114)",
            fontsize=8,
            va="top",
            color="#444",
        )
    return fig


def _rect(row: int, s: int) -> Rectangle:
    from matplotlib.patches import Rectangle

    return Rectangle((-0.5, row - 0.5), s, 1, fill=False, edgecolor="#c53030", lw=2)
