"""Small shared pieces for experiments: preset budgets, tiny models, one plain training loop, figures.

Experiments need instrumentation that a production loop does not offer (per-step gradient norms, residual RMS,
injected faults), so they train with :func:`fit`, a dozen readable lines, on synthetic tasks or the embedded
corpora.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from anatomy import ModelConfig, build_model


def budget(preset: str, smoke: Any, quick: Any, full: Any) -> Any:
    """Pick the value for this preset: ``budget(ctx.preset, 20, 300, 2000)``."""
    return {"smoke": smoke, "quick": quick, "full": full}[preset]


def tiny_model(**overrides: Any) -> torch.nn.Module:
    base = dict(architecture="decoder_lm", vocab_size=64, d_model=64, n_heads=4, n_layers=2, max_seq_len=256,
                positional="sinusoidal", norm_position="pre", activation="gelu", dropout=0.0)
    return build_model(ModelConfig(**{**base, **overrides}))


def fit(model: torch.nn.Module, batch: Callable[[int], dict[str, torch.Tensor]], steps: int, *, lr: float = 3e-3,
        warmup: int = 0, clip: float | None = 1.0, on_step: Callable[[int, torch.nn.Module], None] | None = None
        ) -> list[float]:
    """AdamW for ``steps`` steps on ``batch(step)``; returns the loss per step (NaN stays NaN: no silent skip)."""
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    losses = []
    model.train()
    for step in range(steps):
        for group in opt.param_groups:
            group["lr"] = lr * min(1.0, (step + 1) / warmup) if warmup else lr
        loss = model(**batch(step)).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if on_step is not None:
            on_step(step, model)
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        losses.append(loss.item())
        if not math.isfinite(losses[-1]):
            losses += [float("nan")] * (steps - step - 1)
            break
    model.eval()
    return losses


def mean_tail(values: list[float], frac: float = 0.1) -> float:
    n = max(1, int(len(values) * frac))
    return sum(values[-n:]) / n


def figure(path, draw: Callable[[Any], None], *, size=(6, 4)) -> None:
    """Draw into ``path`` with matplotlib (Agg) if a path is given and matplotlib is installed."""
    if path is None:
        return
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # the [viz] extra is not installed: the experiment still records its numbers
        return
    fig, ax = plt.subplots(figsize=size)
    draw(ax)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
