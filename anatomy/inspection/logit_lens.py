"""The logit lens (nostalgebraist 2020): read every layer's residual stream through the model's own output head.

    with capture(model, lens_hooks(model)) as cache:
        model(ids)
    lens = logit_lens(model, cache)        # lens.logits (L + 1, B, T, V): the embeddings, then after each block
    save_figure(lens_figure(lens, tokens=["The", " cat", ...], decode=tok.decode_one), "lens.png")

Each residual ``(B, T, D)`` goes through what the model applies after its last block: the final norm (Pre-Norm
models), T5's output scale, and the unembedding ``lm_head``. On the last block's residual that *is* the model's
forward, so the lens's last row equals the logits. Early rows show how soon the next token is decided, and with
a Post-Norm model (no final norm) how little the earlier residuals look like the last one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

import torch
from torch import nn

from anatomy.inspection.figures import _fonts, bi, drawable, new_figure

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from anatomy.models.stack import TransformerStack


def _parts(model: nn.Module) -> tuple[str, TransformerStack, float]:
    """``(hook-name prefix, stack, output scale)`` of a model with an output head; anything else is refused."""
    if not isinstance(getattr(model, "lm_head", None), nn.Linear):
        raise ValueError(
            f"logit lens: {type(model).__name__} has no lm_head (it needs a language model or a "
            "seq2seq model: DecoderLM, Seq2Seq)"
        )
    if hasattr(model, "stack") and hasattr(model.stack, "blocks"):
        return "stack", cast("TransformerStack", model.stack), 1.0
    decoder = getattr(model, "decoder", None)
    if decoder is not None and hasattr(getattr(decoder, "stack", None), "blocks"):
        return "decoder.stack", decoder.stack, float(getattr(model, "output_scale", 1.0))
    raise ValueError(f"logit lens: {type(model).__name__} has no stack of blocks to read")


def lens_hooks(model: nn.Module) -> list[str]:
    """The residual streams the lens reads: block 0's input (the embeddings), then every block's output."""
    prefix, stack, _ = _parts(model)
    return [f"{prefix}.blocks.0.hook_resid_pre"] + [
        f"{prefix}.blocks.{i}.hook_resid_post" for i in range(len(stack.blocks))
    ]


@dataclass
class LogitLens:
    labels: list[str]  # "embeddings", "block 0", ..., one per row of logits
    logits: torch.Tensor  # (L + 1, B, T, V)

    def probs(self) -> torch.Tensor:
        return self.logits.float().softmax(-1)  # (L + 1, B, T, V)

    def top(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Top-1 token id and its probability per layer and position, each ``(L + 1, B, T)``."""
        p, ids = self.probs().max(-1)
        return ids, p


@torch.no_grad()
def unembed(model: nn.Module, resid: torch.Tensor) -> torch.Tensor:
    """``(..., D)`` residual → ``(..., V)`` logits, through the model's final norm, output scale, ``lm_head`` and the
    final logit soft cap (Gemma 2), as the model's own forward."""
    _, stack, out_scale = _parts(model)
    x = resid if stack.final_norm is None else stack.final_norm(resid)
    head: nn.Module = model.lm_head  # type: ignore[assignment]  # checked by _parts
    logits: torch.Tensor = head(x * out_scale if out_scale != 1.0 else x)
    cap = getattr(model, "final_logit_softcap", None)
    return logits if cap is None else torch.tanh(logits / cap) * cap


def logit_lens(model: nn.Module, cache: dict[str, torch.Tensor], *, layers: list[int] | None = None) -> LogitLens:
    """Logits of each captured residual stream (``lens_hooks(model)`` names them); ``layers`` picks blocks."""
    names = lens_hooks(model)
    n = len(names) - 1
    chosen = list(range(n)) if layers is None else list(layers)
    bad = [i for i in chosen if not 0 <= i < n]
    if bad:
        raise ValueError(f"layers: block {bad[0]} does not exist (the model has {n} blocks)")
    rows = [("embeddings", names[0])] if layers is None else []
    rows += [(f"block {i}", names[i + 1]) for i in chosen]
    missing = [name for _, name in rows if name not in cache]
    if missing:
        raise ValueError(
            f"logit lens: the cache holds no {missing[0]!r}; capture the residuals first: "
            "with capture(model, lens_hooks(model)) as cache: model(ids)"
        )
    logits = torch.stack([unembed(model, cache[name]) for _, name in rows])  # (L + 1, B, T, V)
    return LogitLens(labels=[label for label, _ in rows], logits=logits)


def lens_figure(
    lens: LogitLens,
    tokens: list[str] | None = None,
    *,
    batch: int = 0,
    decode: Callable[[int], object] | None = None,
    targets: torch.Tensor | None = None,
) -> Figure:
    """A layers × positions grid: colour = probability of the top-1 token (of ``targets[t]`` when given, e.g.
    the next input token), text = the top-1 token (``decode(id)``, else its id). ``tokens`` label the columns."""
    ids, p = lens.top()
    ids, p = ids[:, batch], p[:, batch]  # (L + 1, T)
    if targets is not None:
        want = torch.as_tensor(targets).reshape(1, -1)  # (1, T)
        if want.shape[1] != ids.shape[1]:
            raise ValueError(f"targets must hold one id per position ({ids.shape[1]}), got {want.shape[1]}")
        p = lens.probs()[:, batch].gather(-1, want.expand(ids.shape[0], -1)[..., None])[..., 0]  # (L + 1, T)
    rows, cols = ids.shape
    if tokens is not None and len(tokens) != cols:
        raise ValueError(f"tokens must label every position ({cols}), got {len(tokens)}")
    with _fonts():  # text objects take their font when created
        fig = new_figure(figsize=(max(4.0, 0.75 * cols + 2), max(2.5, 0.42 * rows + 1.4)))
        ax = fig.add_subplot()
        image = ax.imshow(p.numpy(), cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto", origin="lower")
        for r in range(rows):
            for c in range(cols):
                text = decode(int(ids[r, c])) if decode is not None else str(int(ids[r, c]))
                ax.text(
                    c,
                    r,
                    drawable(repr(text)[1:-1] if isinstance(text, str) else str(text))[:8],
                    ha="center",
                    va="center",
                    fontsize=7,
                    color="white" if p[r, c] < 0.6 else "black",
                )
        ax.set_yticks(range(rows), lens.labels)
        ax.set_xticks(
            range(cols),
            [drawable(t) for t in tokens] if tokens is not None else [str(c) for c in range(cols)],
            rotation=45 if tokens is not None else 0,
            ha="right" if tokens is not None else "center",
        )
        ax.set_xlabel(bi("input position (its top-1 prediction for the next token)", "输入位置(对下一个词的预测)"))
        ax.set_title(
            bi(
                "logit lens: each layer's residual through the final norm and unembedding",
                "logit lens:各层残差经最终归一化与输出层",
            ),
            fontsize=9,
        )
        fig.colorbar(image, ax=ax, label="p(target)" if targets is not None else "p(top-1)")
    return fig
