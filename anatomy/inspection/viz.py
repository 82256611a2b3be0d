"""Pictures a learner can keep: attention maps, positional encodings, masks and what fill values do to softmax.

Every number drawn here is computed by the package's own components (positional tables from
``components/positional``, masks from ``components/masks``, weights from the model's attention or
:mod:`anatomy.inspection.weights`); nothing is typed by hand.

Figures are plain ``matplotlib.figure.Figure`` objects (no pyplot, no global state) saved with :func:`save_figure`
as PNG or SVG. Chinese text needs a CJK font: :func:`cjk_font` looks for one on the system (WenQuanYi, Noto CJK,
Source Han, ...). Without one, Chinese labels are left out and Chinese tokens are drawn as ``U+XXXX`` code points,
with :data:`CJK_HINT` saying which package to install, never as empty boxes.

One module per kind of picture: attention maps here, ``viz_pe`` (positional encodings), ``viz_masks`` (masks and
fill values), over ``figures`` (fonts, saving); import each name from the module that defines it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from anatomy.inspection.figures import (
    _fonts,
    bi,
    cjk_font,
    cjk_hint,
    drawable,
    needs_cjk,
    new_figure,
)
from anatomy.inspection.weights import LayerWeights, head_entropy

if TYPE_CHECKING:
    from matplotlib.figure import Figure

TOKENIZER_NOTE = (
    "tokens: one per character, id = ord(char) mod vocab_size={vocab} (character-level, no trained tokenizer)"
)


# --------------------------------------------------------------------------------------------------- tokens


def char_tokens(text: str, vocab_size: int) -> tuple[list[str], torch.Tensor]:
    """Character-level tokens and ids ``(1, T)``: each character's code point modulo ``vocab_size``."""
    if not isinstance(text, str) or not text:
        raise ValueError("--text must be a non-empty string")
    tokens = list(text)
    return tokens, torch.tensor([[ord(c) % vocab_size for c in tokens]])  # (1, T)


# --------------------------------------------------------------------------------------------------- attention


def _tick_step(n: int) -> int:
    return max(1, math.ceil(n / 32))


def attention_figure(
    layer: LayerWeights,
    q_tokens: Sequence[str],
    k_tokens: Sequence[str] | None = None,
    *,
    batch: int = 0,
    title: str = "",
    note: str = "",
) -> Figure:
    """A grid of the heads of one layer: rows are queries, columns keys, each title with the head's entropy."""
    k_tokens = list(q_tokens) if k_tokens is None else list(k_tokens)
    weights = layer.weights[batch].float()  # (h, T, S)
    n = weights.shape[0]
    t, s = weights.shape[-2:]
    if (t, s) != (len(q_tokens), len(k_tokens)):
        raise ValueError(
            f"tokens ({len(q_tokens)} queries, {len(k_tokens)} keys) do not match the weights (T={t}, S={s})"
        )
    entropy = head_entropy(weights)
    cols = min(4, n)
    rows = math.ceil(n / cols)
    cell = max(2.6, min(5.0, 0.28 * max(t, s)))
    with _fonts():
        fig = new_figure(figsize=(cell * cols + 1.2, cell * rows + 1.6), layout="constrained")
        axes = fig.subplots(rows, cols, squeeze=False)
        vmax = float(weights.max()) or 1.0
        qs, ks = [drawable(x) for x in q_tokens], [drawable(x) for x in k_tokens]
        image = None
        for i, ax in enumerate(axes.flat):
            if i >= n:
                ax.set_visible(False)
                continue
            image = ax.imshow(weights[i].numpy(), cmap="Blues", vmin=0.0, vmax=vmax, aspect="equal")
            step_k, step_q = _tick_step(s), _tick_step(t)
            long_labels = max(len(x) for x in ks) * s > 30  # labels would touch: stand them up
            ax.set_xticks(range(0, s, step_k), ks[::step_k], fontsize=8, rotation=90 if long_labels else 0)
            ax.set_yticks(range(0, t, step_q), qs[::step_q], fontsize=8)
            ax.set_title(
                f"head {layer.heads[i]} · " + bi(f"entropy {entropy[i]:.2f} nats", f"熵 {entropy[i]:.2f}"), fontsize=10
            )
            if i % cols == 0:
                ax.set_ylabel(bi("query", "查询"))
            if i // cols == rows - 1:
                ax.set_xlabel(bi("key", "键"))
        assert image is not None  # n >= 1 heads: the first axis drew one
        fig.colorbar(image, ax=axes, shrink=0.8, label=bi("attention weight", "注意力权重"))
        head = title or f"layer {layer.index} ({layer.name})"
        fig.suptitle(head + f" · max entropy log(S) = {math.log(s):.2f} nats", fontsize=12)
        notes = [note] if note else []
        if needs_cjk("".join(q_tokens) + "".join(k_tokens)) and not cjk_font():
            notes.append(cjk_hint())
        if notes:
            fig.text(0.0, -0.01, "\n".join(notes), fontsize=8, va="top", ha="left", color="#444")
    return fig
