"""Small shared pieces for experiments: preset budgets, tiny models, one plain training loop, figures.

Experiments need instrumentation that a production loop does not offer (per-step gradient norms, residual RMS,
injected faults), so they train with :func:`fit`, a dozen readable lines, on synthetic tasks or the embedded
corpora.
"""

from __future__ import annotations

import collections
import functools
import math
from collections.abc import Callable
from contextlib import contextmanager
from typing import Any

import torch

from anatomy import ModelConfig, build_model
from anatomy.experiments.registry import Verdict


def budget(preset: str, smoke: Any, quick: Any, full: Any) -> Any:
    """Pick the value for this preset: ``budget(ctx.preset, 20, 300, 2000)``."""
    return {"smoke": smoke, "quick": quick, "full": full}[preset]


def tiny_model(**overrides: Any) -> torch.nn.Module:
    base = dict(architecture="decoder_lm", vocab_size=64, d_model=64, n_heads=4, n_layers=2, max_seq_len=256,
                positional="sinusoidal", norm_position="pre", activation="gelu", dropout=0.0)
    return build_model(ModelConfig(**{**base, **overrides}))


def fit(model: torch.nn.Module, batch: Callable[[int], dict[str, torch.Tensor]], steps: int, *, lr: float = 3e-3,
        warmup: int = 0, clip: float | None = 1.0, on_step: Callable[[int, torch.nn.Module], None] | None = None,
        decay: bool = False) -> list[float]:
    """AdamW for ``steps`` steps on ``batch(step)``; returns the loss per step (NaN stays NaN: no silent skip)."""
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    losses = []
    model.train()
    for step in range(steps):
        for group in opt.param_groups:
            ramp = min(1.0, (step + 1) / warmup) if warmup else 1.0
            group["lr"] = lr * ramp * ((1 - step / steps) if decay else 1.0)
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


# --- Appended for the §3–§5 claims (positional, add_norm, block); generic helpers any experiment may use -------

class MarkovTask:
    """A small text-like language with a known best loss.

    Token ``t`` is a fixed random function of the tokens ``lags`` places back with probability ``p``, else a
    uniform draw. With ``lags=(2,)`` the next token depends on the token two places back, so a model has to find
    that token *by its position* (no positional information: it cannot do much better than ``ln V``). With
    ``lags=(1, 2)`` it must combine two tokens through a table of ``V**2`` rows (work for the FFN). ``floor`` is the
    entropy of one predicted token (the best possible loss), ``uniform = ln V``.
    """

    def __init__(self, vocab: int = 16, lags: tuple[int, ...] = (2,), p: float = 0.9, seed: int = 0) -> None:
        if not lags or min(lags) < 1:
            raise ValueError(f"lags must be positive offsets, got {lags!r}")
        g = torch.Generator().manual_seed(10_000 + seed)
        self.vocab, self.lags, self.p = vocab, tuple(lags), p
        self.table = (torch.randperm(vocab, generator=g) if len(lags) == 1
                      else torch.randint(0, vocab, (vocab ** len(lags),), generator=g))

    @property
    def start(self) -> int:
        """The first position whose token follows the rule (earlier ones are uniform and not scored)."""
        return max(self.lags)

    @property
    def floor(self) -> float:
        v, p = self.vocab, self.p
        hit, miss = p + (1 - p) / v, (1 - p) / v
        return -(hit * math.log(hit) + (v - 1) * miss * math.log(miss)) if miss > 0 else 0.0

    @property
    def uniform(self) -> float:
        return math.log(self.vocab)

    def sample(self, n: int, length: int, generator: torch.Generator) -> torch.Tensor:
        x = torch.randint(0, self.vocab, (n, length), generator=generator)  # (N, T)
        keep = torch.rand(n, length, generator=generator) < self.p
        for t in range(self.start, length):
            idx = torch.zeros(n, dtype=torch.long)
            for lag in self.lags:
                idx = idx * self.vocab + x[:, t - lag]
            x[:, t] = torch.where(keep[:, t], self.table[idx], x[:, t])
        return x

    def batch(self, ids: torch.Tensor) -> dict[str, torch.Tensor]:
        """LM inputs with the unpredictable first tokens left out of the loss (label -100)."""
        labels = ids.clone()
        labels[:, : self.start] = -100
        return {"input_ids": ids, "labels": labels}


@torch.no_grad()
def loss_per_position(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Next-token cross-entropy of a causal LM per position ``t`` (predicting token ``t + 1``), averaged over the
    batch: ``(T - 1,)``, NaN where every label is -100."""
    model.eval()
    logits = model(input_ids=batch["input_ids"], attention_mask=batch.get("attention_mask")).logits
    labels = batch["labels"][:, 1:]
    ce = torch.nn.functional.cross_entropy(logits[:, :-1].transpose(1, 2).float(), labels.clamp_min(0),
                                           reduction="none")  # (B, T-1)
    valid = (labels != -100).float()
    return (ce * valid).sum(0) / valid.sum(0)  # 0/0 = NaN where nothing is scored


def curve_stats(losses: list[float], *, uniform: float | None = None) -> dict[str, float]:
    """Summary of a loss curve: ``final`` (mean of the last 10%, NaN if the run went NaN), ``nan`` (0/1),
    ``spike`` (largest rise of the curve, smoothed over 5% of the steps so that minibatch noise does not count,
    above its running minimum after the first 10% of steps: oscillation; inf if it went NaN), ``rough`` (how much
    the smoothed curve climbs back per unit it descends: 0 for a steady descent, about 1 for a curve that only
    wanders, capped at 2; 2 if it went NaN), ``start`` (first loss) and ``failed`` (1 if NaN, or if the final
    loss is within 0.1 of ``uniform``: nothing learnt)."""
    n = len(losses)
    nan = any(not math.isfinite(v) for v in losses)
    final = float("nan") if nan else mean_tail(losses)
    w = max(1, n // 20)
    smooth = [sum(losses[i:i + w]) / w for i in range(max(1, n - w + 1))] if n else []
    spike, low = 0.0, float("inf")
    for i, v in enumerate(smooth):
        if not math.isfinite(v):
            spike = float("inf")
            break
        if i >= max(1, n // 10):
            spike = max(spike, v - low)
        low = min(low, v)
    steps = [b - a for a, b in zip(smooth, smooth[1:])]
    down = -sum(d for d in steps if d < 0)
    rough = min(2.0, sum(d for d in steps if d > 0) / down) if down > 0 and not nan else 2.0
    failed = nan or (uniform is not None and final >= uniform - 0.1)
    return {"final": final, "nan": float(nan), "spike": spike, "rough": rough,
            "start": losses[0] if losses else float("nan"), "failed": float(failed)}


def residual_rms(model: torch.nn.Module, inputs: dict[str, torch.Tensor],
                 pattern: str = "stack.blocks.*.hook_resid_post") -> list[float]:
    """RMS of the residual stream after each block (over tokens and features), one value per layer."""
    from anatomy.inspection import capture

    model.eval()
    with torch.no_grad(), capture(model, pattern) as cache:
        model(**inputs)
    return [t.float().pow(2).mean().sqrt().item() for t in cache.values()]


def residual_grad_norms(model: torch.nn.Module, batch: dict[str, torch.Tensor],
                        pattern: str = "stack.blocks.*.hook_resid_pre") -> list[float]:
    """‖∂loss/∂x_l‖ for the residual stream entering each block (RMS per token), one value per layer: how much
    gradient reaches each depth. Parameter gradients are cleared afterwards."""
    from anatomy.inspection import capture

    model.eval()
    with capture(model, pattern, detach=False) as cache:
        loss = model(**batch).loss
        tensors = list(cache.values())
        for t in tensors:
            t.retain_grad()
        loss.backward()
    out = [t.grad.float().pow(2).mean().sqrt().item() if t.grad is not None else float("nan") for t in tensors]
    model.zero_grad(set_to_none=True)
    return out


def figure_grid(path, draw: Callable[[list], None], *, nrows: int = 1, ncols: int = 2, size=(10, 4),
                sharey: bool = False) -> None:
    """Like :func:`figure`, with a grid of axes: ``draw(axes)`` gets them as a flat list (row by row)."""
    if path is None:
        return
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, axes = plt.subplots(nrows, ncols, figsize=size, sharey=sharey, squeeze=False)
    draw([ax for row in axes for ax in row])
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def per_seed(metrics: dict, *names: str) -> list[tuple[float, ...]]:
    """Several metrics seed by seed, ``[(a0, b0), (a1, b1), ...]``, for rules that combine them per seed."""
    return list(zip(*(metrics[n].values for n in names)))


def count_seeds(metrics: dict, names: tuple[str, ...] | list[str], pred: Callable[..., bool]) -> tuple[int, int]:
    """How many seeds satisfy ``pred(*values)`` (the values of ``names`` on that seed), and how many seeds."""
    rows = per_seed(metrics, *names)
    return sum(1 for row in rows if pred(*row)), len(rows)


def seeds_disagree(en: str, zh: str) -> Verdict:
    """The last resort of a rule: inconclusive, the numbers ``en``/``zh`` followed by "the seeds disagree"."""
    return Verdict("inconclusive", en + " The seeds disagree.", zh + "各种子结论不一致。")


def all_or_none(holds: list[bool], en: str, zh: str, *, refute_en: str = "", refute_zh: str = "") -> Verdict:
    """Supported if the claim ``holds`` on every seed, refuted if on none (the numbers ``en``/``zh`` followed by
    ``refute_en``/``refute_zh``), otherwise :func:`seeds_disagree`."""
    if all(holds):
        return Verdict("supported", en, zh)
    if not any(holds):
        return Verdict("refuted", en + refute_en, zh + refute_zh)
    return seeds_disagree(en, zh)


VERDICT_ZH = {"supported": "成立", "refuted": "不成立", "nuanced": "有条件成立", "inconclusive": "无定论"}


def seed_verdict(ms, names, classify, en: str, zh: str, lead: dict | None = None) -> Verdict:
    """``classify(*values_of_one_seed) -> verdict``; the claim's verdict if every seed gives the same one, else
    inconclusive. ``en``/``zh`` are the reasons (already filled with the numbers); ``lead`` optionally maps a
    verdict to an opening sentence ``(en, zh)`` that says in words what the numbers mean."""
    cats = [classify(*row) for row in per_seed(ms, *names)]
    counts = collections.Counter(cats)
    if len(counts) == 1:
        first = (lead or {}).get(cats[0])
        if first:
            return Verdict(cats[0], f"{first[0]} {en}", f"{first[1]}{zh}")
        return Verdict(cats[0], en, zh)
    split = ", ".join(f"{v} {n}" for v, n in counts.items())
    split_zh = "，".join(f"{VERDICT_ZH[v]} {n}" for v, n in counts.items())
    return Verdict("inconclusive", f"The seeds disagree ({split}). {en}", f"各随机种子结论不一致（{split_zh}）。{zh}")

def fmt_values(values: list[float], unit: str = "", digits: int = 3) -> str:
    """Mean ± spread of per-seed values derived inside a rule, formatted like a recorded metric."""
    from anatomy.experiments.registry import Metric

    if values and len(set(values)) == 1 and float(values[0]).is_integer():
        return f"{int(values[0])}{unit}"
    return Metric("derived", [float(v) for v in values], unit).fmt(digits)


# --- Appended for the §1–§2 claims (multihead, implementation); generic helpers any experiment may use ---------

@functools.lru_cache(maxsize=4)
def char_corpus(name: str = "shakespeare", max_train: int = 300_000, max_val: int = 50_000
                ) -> tuple[torch.Tensor, torch.Tensor, tuple[str, ...]]:
    """An embedded corpus as character ids: ``(train ids, val ids, vocabulary)`` (split seed 0, cached; do not
    modify the tensors). Characters of the validation text unseen in training map to id 0."""
    from anatomy.data import corpus_splits

    parts = corpus_splits(name, 0)
    train_text, val_text = parts["train"][:max_train], parts["val"][:max_val]
    vocab = tuple(sorted(set(train_text)))
    stoi = {c: i for i, c in enumerate(vocab)}
    train = torch.tensor([stoi[c] for c in train_text], dtype=torch.long)
    val = torch.tensor([stoi.get(c, 0) for c in val_text], dtype=torch.long)
    return train, val, vocab


def lm_batch(data: torch.Tensor, length: int, batch: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
    """``batch`` random windows of ``length`` tokens from a 1-D id tensor, as causal-LM inputs (labels = ids)."""
    start = torch.randint(0, len(data) - length, (batch,), generator=generator)
    ids = torch.stack([data[s:s + length] for s in start.tolist()])  # (B, T)
    return {"input_ids": ids, "labels": ids}


def attention_entropy(weights: torch.Tensor, first: int, stop: int) -> torch.Tensor:
    """Normalised entropy ``H / log(n)`` of causal attention rows ``first..stop-1``, per head:
    ``weights (B, H, T, T)`` → ``(H,)``. Row ``t`` sees ``n = t + 1`` keys (``first >= 1``). 1 = uniform over the
    visible keys (diffuse), 0 = all the mass on one key."""
    if first < 1:
        raise ValueError(f"first must be >= 1 (row 0 sees a single key), got {first}")
    w = weights.double()[:, :, first:stop]  # (B, H, R, T)
    n = torch.arange(first, stop, dtype=torch.float64) + 1
    h = -(w * w.clamp_min(1e-300).log()).sum(-1)  # (B, H, R)
    return (h / n.log()).mean(dim=(0, 2))


def offset_profile(weights: torch.Tensor, max_offset: int, rows: slice | None = None) -> torch.Tensor:
    """Mean attention mass at each backward offset ``0..max_offset`` (key = query - offset), per head:
    ``weights (B, H, T, T)`` → ``(H, max_offset + 1)``, over query rows ``rows`` (default: rows ``>= max_offset``)."""
    t = weights.shape[-1]
    q = torch.arange(t)[rows if rows is not None else slice(max_offset, None)]
    out = [weights[:, :, q, q - k].mean(dim=(0, 2)) for k in range(max_offset + 1)]  # each (H,)
    return torch.stack(out, dim=-1).double()


@contextmanager
def ablate_head(attn: torch.nn.Module, head: int):
    """Zero one head's output ``z`` (before the heads are merged) inside the block; restored on exit."""
    def hook(_module, _args, out):
        out = out.clone()
        out[:, head] = 0.0
        return out

    handle = attn.hook_z.register_forward_hook(hook)
    try:
        yield attn
    finally:
        handle.remove()


BLOWN_UP = 1e6


def finite_metrics(values: dict[str, float]) -> dict[str, float]:
    """Metrics with every NaN/inf replaced by ±``BLOWN_UP`` (1e6): a quantity measured on a run that blew up.
    The registry's mean/spread need finite numbers, and a report should say "1e+06" rather than crash."""
    out = {}
    for k, v in values.items():
        v = float(v)
        out[k] = v if math.isfinite(v) else (-BLOWN_UP if v < 0 else BLOWN_UP)
    return out


def fmt_blown(metric, zh: bool = False) -> str:
    """A metric that ``finite_metrics`` may have capped: say "not finite" instead of printing the cap."""
    blown = sum(abs(v) >= BLOWN_UP for v in metric.values)
    if not blown:
        return metric.fmt()
    if blown == metric.n:
        return "非有限（训练发散）" if zh else "not finite (training diverged)"
    kept = type(metric)(metric.name, [v for v in metric.values if abs(v) < BLOWN_UP], metric.unit)
    return (f"{kept.fmt()}（另有 {blown}/{metric.n} 个种子发散）" if zh
            else f"{kept.fmt()} ({blown} of {metric.n} seeds diverged)")


def fmt_count(metric) -> str:
    """A metric that is a whole number on every seed, printed as one (``3`` rather than ``3 ± 0``)."""
    vals = metric.values
    if all(float(v).is_integer() for v in vals) and len(set(vals)) == 1:
        return str(int(vals[0]))
    return metric.fmt()


def fit_decayed(model: torch.nn.Module, batch: Callable[[int], dict[str, torch.Tensor]], steps: int, *,
                lr: float = 3e-3, warmup: int = 20, clip: float | None = 1.0) -> list[float]:
    """Like :func:`fit`, with the learning rate decayed linearly to 0 after ``warmup`` steps: the final weights do
    not depend on where the last noisy step happened to land, so comparisons between short runs are steadier."""
    return fit(model, batch, steps, lr=lr, warmup=warmup, clip=clip, decay=True)
