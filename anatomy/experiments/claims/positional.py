"""§3: positional encoding in trained models (the experiment of claims C21, C22, C27, C29–C31).

``pe-lm``                one small causal LM per positional scheme (none, sinusoidal, learned, RoPE, ALiBi, T5,
                         Shaw, and sinusoidal *concatenated* instead of added), trained at length T on a text-like
                         Markov task whose next token depends on the token two places back, then evaluated at 4T:
                         loss per position inside and beyond the training length (C29–C31), add vs concat (C22),
                         what the trained attention scores depend on (C27), what a model without PE can and cannot
                         see (C21).

The claims judged on it are in ``positional_claims``; the exact algebra of the sinusoidal table and of RoPE
(C23–C26, C28, C32) is in ``sinusoidal``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from anatomy import ModelConfig
from anatomy.components.positional import sinusoidal_table
from anatomy.components.positional.base import PositionalScheme
from anatomy.experiments.devices import on
from anatomy.experiments.figures import figure
from anatomy.experiments.fitting import POST_SIZES, budget, build, finite_metrics, fit, model_device
from anatomy.experiments.probes import hook_output, loss_per_position
from anatomy.experiments.registry import Trial, experiment
from anatomy.experiments.tasks import MarkovTask

PE_KINDS = ("none", "sinusoidal", "learned", "rope", "alibi", "t5", "shaw")
COLORS = {
    "none": "0.5",
    "sinusoidal": "tab:blue",
    "learned": "tab:orange",
    "rope": "tab:green",
    "alibi": "tab:red",
    "t5": "tab:purple",
    "shaw": "tab:brown",
    "concat": "tab:cyan",
}


class ConcatSinusoidal(PositionalScheme):
    """The alternative the post sets aside (§3.1): *concatenate* a position vector instead of adding it.

    The last ``d_pos`` features of the embedding are replaced by a sinusoidal table of width ``d_pos``: at the same
    model width the token keeps ``D - d_pos`` features. (Keeping all D token features means a wider model, whose
    cost the experiment counts.)"""

    site = "embedding"

    def __init__(self, d_model: int, d_pos: int) -> None:
        super().__init__()
        if d_pos % 2 or not 0 < d_pos < d_model:
            raise ValueError(f"d_pos must be even and in (0, d_model={d_model}), got {d_pos}")
        self.d_model, self.d_pos = d_model, d_pos

    def add_to_embeddings(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        table = sinusoidal_table(positions, self.d_pos).to(x.dtype)  # (B|1, T, d_pos)
        table = table.expand(x.shape[0], -1, -1)
        return torch.cat([x[..., : self.d_model - self.d_pos], table], dim=-1)  # (B, T, D)


def _n_params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def _rel_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).abs().max() / a.abs().max().clamp_min(1e-30)).item()


def _offset_r2(model: torch.nn.Module, vocab: int, length: int) -> float:
    """How much of layer 0's attention scores is a function of the offset i - j alone.

    Every row of the input repeats one token, so the scores can only vary with the positions; R² of the scores
    (j <= i) explained by their offset, averaged over tokens and heads. 1.0: the scores see only relative
    position (RoPE, ALiBi by construction); lower: absolute position leaks in."""
    dev = model_device(model)
    ids = torch.arange(vocab, device=dev)[:, None].expand(vocab, length).contiguous()  # (V, T)
    model.eval()
    scores = hook_output(model, "stack.blocks.0.attn.hook_scores", input_ids=ids).double()  # (V, H, T, T)
    i, j = torch.tril_indices(length, length, device=dev)
    vals = scores[:, :, i, j]  # (V, H, N)
    onehot = torch.nn.functional.one_hot(i - j, length).double()  # (N, T) offset groups
    means = (vals @ onehot) / onehot.sum(0).clamp_min(1)  # (V, H, T)
    fitted = means[..., i - j]
    ss_res = (vals - fitted).pow(2).sum(-1)
    ss_tot = (vals - vals.mean(-1, keepdim=True)).pow(2).sum(-1)
    keep = ss_tot > 1e-12 * vals.pow(2).sum(-1).clamp_min(1e-30)
    if not bool(keep.any()):
        return 1.0
    return (1 - ss_res[keep] / ss_tot[keep]).mean().item()


def _order_blindness(seed: int, device: str = "cpu") -> dict[str, float]:
    """Exact checks (float64, untrained models): does self-attention without PE see word order?"""
    torch.manual_seed(seed)
    base: dict[str, Any] = dict(vocab_size=16, d_model=32, n_heads=4, n_layers=2, dropout=0.0)
    enc = build(ModelConfig(architecture="encoder", positional="none", **base), device).double().eval()
    torch.manual_seed(seed)
    enc_pe = build(ModelConfig(architecture="encoder", positional="sinusoidal", **base), device).double().eval()
    g = torch.Generator().manual_seed(seed)
    ids = on(device, lambda: torch.randint(1, 16, (4, 12), generator=g))
    perm = on(device, lambda: torch.randperm(12, generator=g))
    wo_da_ni = torch.tensor([[1, 2, 3]], device=device)  # 我 打 你
    ni_da_wo = torch.tensor([[3, 2, 1]], device=device)  # 你 打 我
    with torch.no_grad():
        h = enc(ids).last_hidden_state
        equivariance = _rel_diff(h[:, perm], enc(ids[:, perm]).last_hidden_state)
        # each word's vector in one sentence against the same word's vector in the other
        a, b = enc(wo_da_ni).last_hidden_state, enc(ni_da_wo).last_hidden_state.flip(1)
        a_pe, b_pe = enc_pe(wo_da_ni).last_hidden_state, enc_pe(ni_da_wo).last_hidden_state.flip(1)
        torch.manual_seed(seed)
        dec = build(ModelConfig(architecture="decoder_lm", positional="none", **base), device).double().eval()
        x = on(device, lambda: torch.randint(1, 16, (1, 8), generator=g))
        swapped = x.clone()
        swapped[0, :3] = x[0, :3].flip(0)  # same tokens, same last token, prefix order changed
        causal = _rel_diff(dec(input_ids=x).logits[0, -1], dec(input_ids=swapped).logits[0, -1])
    return {
        "nope_equivariance_err": equivariance,
        "wo_da_ni_diff_nope": _rel_diff(a, b),
        "wo_da_ni_diff_sinusoidal": _rel_diff(a_pe, b_pe),
        "causal_nope_order_diff": causal,
    }


def _rotation_checks(d: int = 64, n: int = 256, device: str = "cpu") -> dict[str, float]:
    """PE(p + k) = R_k PE(p) with a fixed block rotation R_k; PE(p)·PE(p + k) depends on k only (float64)."""
    pos = torch.arange(n + 64, dtype=torch.float64, device=device)
    pe = sinusoidal_table(pos, d, dtype=torch.float64)  # (N, D): sin on even, cos on odd dims
    w = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64, device=device) / d)
    worst, spread = 0.0, 0.0
    for k in (1, 5, 17, 63):
        c, s = torch.cos(k * w), torch.sin(k * w)
        sin_p, cos_p = pe[:n, 0::2], pe[:n, 1::2]
        rotated = torch.stack([sin_p * c + cos_p * s, cos_p * c - sin_p * s], dim=-1).flatten(-2)  # R_k PE(p)
        worst = max(worst, (rotated - pe[k : n + k]).abs().max().item())
        dots = (pe[:n] * pe[k : n + k]).sum(-1)
        spread = max(spread, (dots.std() / dots.abs().mean()).item())
    return {"rotation_residual": worst, "dot_shift_spread": spread}


@experiment("pe-lm", units={"train_length": " tokens"})
def pe_lm(trial: Trial) -> dict[str, float]:
    T = budget(trial.preset, 16, 32, 64, POST_SIZES["T"])
    steps = budget(trial.preset, 40, 200, 1000)
    batch, d_model = 16, budget(trial.preset, 32, 32, 64, POST_SIZES["d_model"])
    task = MarkovTask(vocab=16, lags=(2,), p=0.9, seed=trial.seed)
    g, dev = torch.Generator().manual_seed(trial.seed), trial.device
    train = task.sample(steps * batch, T, g, dev)
    held = task.batch(task.sample(budget(trial.preset, 16, 64, 128), 4 * T, g, dev))

    def batches(step: int) -> dict[str, torch.Tensor]:
        return task.batch(train[step * batch : (step + 1) * batch])

    base = dict(
        vocab_size=task.vocab,
        d_model=d_model,
        n_heads=budget(trial.preset, 4, 4, 4, POST_SIZES["n_heads"]),
        n_layers=budget(trial.preset, 2, 2, 2, POST_SIZES["n_layers"]),
        max_seq_len=4 * T,
        dropout=0.0,
        init="xavier",
        scale_embeddings=True,
    )  # the 2017 recipe: embeddings ~ N(0, 1/D) times sqrt(D)
    out: dict[str, float] = {"train_length": T, "train_steps": steps, "floor": task.floor, "uniform": task.uniform}
    curves: dict[str, torch.Tensor] = {}
    models: dict[str, nn.Module] = {}
    for kind in (*PE_KINDS, "concat"):
        torch.manual_seed(trial.seed)  # same initial weights wherever the architectures agree
        model = build(ModelConfig(positional="none" if kind == "concat" else kind, **base), dev)
        if kind == "concat":
            # torch's stubs read sub-modules as Tensor | Module: build_model's decoder has its embeddings
            model.embeddings.positional = ConcatSinusoidal(d_model, d_model // 2)  # type: ignore[union-attr]
        losses = fit(model, batches, steps, lr=6e-3, warmup=20)
        lp = loss_per_position(model, held).cpu()  # (4T - 1,)
        curves[kind] = lp
        models[kind] = model
        inside, past = lp[: T - 1].nanmean().item(), lp[T:].nanmean().item()
        out[f"in_{kind}"], out[f"past_{kind}"] = inside, past
        out[f"deg_{kind}"] = (past - inside) / max(task.uniform - inside, 1e-6)
        out[f"train_final_{kind}"] = losses[-1]

    # C30: a learned table of T rows, asked for position T
    torch.manual_seed(trial.seed)
    short = build(ModelConfig(**{**base, "positional": "learned", "max_seq_len": T}), dev)
    try:
        short(input_ids=torch.zeros(1, T + 1, dtype=torch.long, device=dev))
        out["learned_raises_past_table"] = 0.0
    except ValueError:
        out["learned_raises_past_table"] = 1.0

    # C22: what concatenating costs if the token keeps all D features (a model of width 2D)
    wide = build(ModelConfig(**{**base, "d_model": 2 * d_model, "positional": "none"}), dev)
    out["concat_params_ratio"] = (_n_params(wide) - task.vocab * d_model) / _n_params(models["sinusoidal"])

    # C21, C27
    out.update(_order_blindness(trial.seed, dev))
    out["nope_gain"] = (task.uniform - out["in_none"]) / (task.uniform - task.floor)
    out.update(_rotation_checks(device=dev))
    for kind in ("sinusoidal", "learned", "rope", "alibi"):
        out[f"offset_r2_{kind}"] = _offset_r2(models[kind], task.vocab, T)

    _draw_pe_lm(trial, curves, task, T, out, models)
    return finite_metrics(out)


def _draw_pe_lm(
    trial: Trial,
    curves: dict[str, torch.Tensor],
    task: MarkovTask,
    T: int,
    out: dict[str, float],
    models: dict[str, nn.Module],
) -> None:
    path = trial.figure_path("C29-loss-by-position")
    if path is not None:

        def draw(axes: list[Any]) -> None:
            ax, bars = axes
            w = max(1, T // 8)
            for kind, lp in curves.items():
                y = lp.numpy()
                smooth = torch.tensor(y, device="cpu").unfold(0, w, 1).nanmean(-1).numpy() if w > 1 else y
                x = torch.arange(len(smooth), device="cpu") + (w - 1) / 2
                ax.plot(
                    x.numpy(),
                    smooth,
                    color=COLORS[kind],
                    lw=1.6 if kind in ("sinusoidal", "learned", "rope", "alibi") else 1.0,
                    ls="--" if kind == "concat" else "-",
                    label=kind,
                )
            ax.axvline(T - 1, color="k", ls="--", lw=1)
            ax.text(
                T - 1,
                0.12,
                "← seen in training | never seen → ",
                fontsize=8,
                ha="center",
                bbox=dict(facecolor="white", edgecolor="none", alpha=0.8),
            )
            ax.axhline(task.floor, color="k", ls=":", lw=1)
            ax.axhline(task.uniform, color="0.4", ls="-.", lw=1)
            ax.text(4 * T - 2, task.floor - 0.05, "best possible", fontsize=8, ha="right", va="top")
            ax.text(4 * T - 2, task.uniform - 0.05, "uniform guess (ln V)", fontsize=8, ha="right", va="top")
            ax.set(
                xlabel="position in the sequence",
                ylabel="next-token loss (nats)",
                ylim=(0, task.uniform * 1.6),
                title=f"Loss by position: trained on length {T}, tested on length {4 * T}",
            )
            ax.legend(fontsize=7, ncol=2, loc="upper left")
            kinds = list(curves)
            xs = torch.arange(len(kinds), device="cpu").numpy()
            bars.bar(xs - 0.2, [out[f"in_{k}"] for k in kinds], 0.4, label=f"positions < {T}", color="tab:gray")
            bars.bar(
                xs + 0.2,
                [min(out[f"past_{k}"], task.uniform * 1.6) for k in kinds],
                0.4,
                label=f"positions ≥ {T} (never trained)",
                color="tab:red",
            )
            bars.axhline(task.floor, color="k", ls=":", lw=1)
            bars.axhline(task.uniform, color="0.4", ls="-.", lw=1)
            bars.set_xticks(xs, kinds, rotation=30)
            bars.set(ylabel="mean loss (nats)", title="Inside vs beyond the training length")
            bars.legend(fontsize=8)

        figure(path, draw, grid=(1, 2), size=(12, 4.5))

    path = trial.figure_path("C27-scores-by-offset")
    if path is not None:
        ids = torch.full((1, T), 3, dtype=torch.long, device=trial.device)
        mats = {}
        for kind in ("sinusoidal", "learned", "rope", "alibi"):
            s = hook_output(models[kind], "stack.blocks.0.attn.hook_scores", input_ids=ids)[0, 0].cpu().clone()
            s[torch.triu(torch.ones(T, T, dtype=torch.bool, device="cpu"), 1)] = float("nan")
            mats[kind] = s

        def draw_mats(axes: list[Any]) -> None:
            for ax, (kind, s) in zip(axes, mats.items()):
                ax.imshow(s.numpy(), cmap="viridis")
                ax.set(
                    title=f"{kind}: R²(offset) = {out[f'offset_r2_{kind}']:.2f}",
                    xlabel="key position j",
                    ylabel="query position i",
                )
            axes[0].figure.suptitle(
                "Trained layer-0 attention scores (head 0) for a sequence repeating one token: "
                "constant along each diagonal = they depend only on the offset i − j",
                fontsize=10,
            )

        figure(path, draw_mats, grid=(1, 4), size=(14, 4.1))
