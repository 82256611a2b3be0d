"""§4: the norm-depth grid, the central experiment of residuals and normalisation (judged by the claims C33, C34,
C36, C37, C39 in ``norm_depth_claims``, C43, C44, C45 in ``placement_claims``, and C55 of §5 in ``block``).

``norm-depth-grid``      one causal LM task (the lag-2 Markov language of ``tasks.MarkovTask``), Pre-Norm /
                         Post-Norm / DeepNorm across depth and learning rate with no warm-up and no gradient
                         clipping, plus the broken arms (no residual, no norm at all, a large init, a too-high
                         learning rate). Loss curves, NaN/oscillation counts, residual-stream RMS and gradient per
                         layer, attention-score spread.

The other experiments of §4 are in ``add_norm``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from anatomy import ModelConfig, pitfalls
from anatomy.components.add_norm import AddNorm
from anatomy.experiments.figures import figure
from anatomy.experiments.fitting import POST_SIZES, budget, build, curve_stats, finite_metrics, fit
from anatomy.experiments.probes import hook_output, residual_grad_norms, residual_rms
from anatomy.experiments.registry import Trial, experiment
from anatomy.experiments.tasks import MarkovTask

PLACEMENTS = ("pre", "post", "deepnorm")
BROKEN = ("no_residual", "no_norm")
ARM_STYLE = {
    "pre": ("tab:blue", "-"),
    "post": ("tab:red", "-"),
    "deepnorm": ("tab:green", "-"),
    "no_residual": ("0.4", "--"),
    "no_norm": ("tab:orange", "--"),
    "large_init": ("tab:purple", ":"),
    "high_lr": ("tab:brown", ":"),
}
Runs = dict[tuple[str, int, float], dict[str, Any]]  # (arm, depth, learning rate) → what one training run recorded
OSCILLATION = 0.5  # nats: a rise of the smoothed loss above its running minimum that counts as oscillating (C33)


def _strip_norms(model: nn.Module) -> None:
    """The 'no normalisation at all' arm (an architecture, not one of the zoo's faults): every norm → identity."""
    for an in model.modules():
        if isinstance(an, AddNorm):
            for name in ("norm", "pre_norm", "post_norm"):
                if name in an._modules:
                    an._modules[name] = nn.Identity()
    stack: Any = model.stack
    stack.final_norm = None


def _capped(stats: dict[str, float], uniform: float) -> float:
    """Final loss, with a run that ended NaN counted as no better than uniform guessing."""
    return stats["final"] if math.isfinite(stats["final"]) else uniform


def _token_cos(model: nn.Module, inputs: dict[str, torch.Tensor], depth: int) -> float:
    """Mean cosine between the token vectors of one sequence after the last block (1 = all tokens alike)."""
    model.eval()
    last = hook_output(model, f"stack.blocks.{depth - 1}.hook_resid_post", **inputs)
    h = torch.nn.functional.normalize(last.double(), dim=-1)  # (B, T, D)
    sim = h @ h.transpose(1, 2)
    t = sim.shape[-1]
    return ((sim.sum((1, 2)) - t) / (t * (t - 1))).mean().item()


def _score_std(model: nn.Module, inputs: dict[str, torch.Tensor], depth: int) -> float:
    model.eval()
    s = hook_output(model, f"stack.blocks.{depth - 1}.attn.hook_scores", **inputs)  # (B, H, T, T), pre-mask
    i, j = torch.tril_indices(s.shape[-1], s.shape[-1], device=s.device)
    return s[..., i, j].float().std().item()


def _highway_grads(model: nn.Module, batch: dict[str, torch.Tensor]) -> list[float]:
    """The gradient along the residual path alone: every sub-layer output is held constant (detached), so
    ∂loss/∂x reaches the lower layers only through the skip connections (and whatever norm sits on them).
    Returns ‖∂/∂x‖ into each block; the ratio first ÷ last is exactly 1 for Pre-Norm's x + f(norm(x)), and for
    Post-Norm the product of what each LayerNorm on the path does to the gradient."""
    hooks = [
        m.register_forward_hook(lambda _m, _a, out: out.detach())
        for name, m in model.named_modules()
        if name.endswith(("hook_attn_out", "hook_ffn_out"))
    ]
    try:
        grads = residual_grad_norms(model, batch)
    finally:
        for h in hooks:
            h.remove()
    return grads


def _grid_settings(preset: str) -> dict[str, Any]:
    return dict(
        depths=budget(preset, (2, 3), (2, 6), (2, 6, 12)),
        lrs=budget(preset, (3e-3, 1e-2), (1e-3, 3e-3, 1e-2), (3e-4, 1e-3, 3e-3, 1e-2)),
        steps=budget(preset, 25, 150, 300),
        T=budget(preset, 16, 16, 32, POST_SIZES["T"]),
        d_model=budget(preset, 32, 32, 32, POST_SIZES["d_model"]),
        n_heads=budget(preset, 4, 4, 4, POST_SIZES["n_heads"]),
        batch=16,
        mid_lr=3e-3,
    )


def _train_arm(
    arm: str,
    depth: int,
    lr: float,
    s: dict[str, Any],
    task: MarkovTask,
    batches: Callable[[int], dict[str, torch.Tensor]],
    held: dict[str, torch.Tensor],
    seed: int,
    measure: bool,
) -> dict[str, Any]:
    placement = arm if arm in PLACEMENTS else "pre"
    torch.manual_seed(seed)
    model = build(
        ModelConfig(
            vocab_size=task.vocab,
            d_model=s["d_model"],
            n_heads=s["n_heads"],
            n_layers=depth,
            max_seq_len=s["T"],
            norm_position=placement,
            init="deepnet" if placement == "deepnorm" else "xavier",
            scale_embeddings=True,
        ),
        held["input_ids"].device,
    )  # the trial's device, where the held-out batch is
    if arm == "no_norm":
        _strip_norms(model)
    elif arm == "no_residual":
        pitfalls.apply(model, "no_residual")  # stays on: this model is only ever the broken one
    elif arm == "large_init":
        pitfalls.apply(model, "large_init_scale", factor=10.0)
    rec: dict[str, Any] = {}
    if measure:
        rec["rms_init"] = residual_rms(model, {"input_ids": held["input_ids"]})
        rec["grad_init"] = residual_grad_norms(model, held)
        rec["cos_init"] = _token_cos(model, {"input_ids": held["input_ids"]}, depth)
        rec["highway_init"] = _highway_grads(model, held) if arm in PLACEMENTS else [float("nan")] * depth
    rec["losses"] = fit(model, batches, s["steps"], lr=lr, clip=None)
    rec["stats"] = curve_stats(rec["losses"], uniform=task.uniform)
    if measure:
        ok = math.isfinite(rec["stats"]["final"])
        rec["rms"] = residual_rms(model, {"input_ids": held["input_ids"]}) if ok else [float("nan")] * depth
        rec["grad"] = residual_grad_norms(model, held) if ok else [float("nan")] * depth
        rec["score_std"] = _score_std(model, {"input_ids": held["input_ids"]}, depth) if ok else float("inf")
        rec["highway"] = _highway_grads(model, held) if ok and arm in PLACEMENTS else [float("nan")] * depth
    return rec


@experiment("norm-depth-grid", units={"depth_deep": " layers"})
def norm_depth_grid(trial: Trial) -> dict[str, float]:
    s = _grid_settings(trial.preset)
    task = MarkovTask(vocab=16, lags=(2,), p=0.9, seed=trial.seed)
    g = torch.Generator().manual_seed(trial.seed)
    train = task.sample(s["steps"] * s["batch"], s["T"], g, trial.device)
    held = task.batch(task.sample(64, s["T"], g, trial.device))

    def batches(step: int) -> dict[str, torch.Tensor]:
        return task.batch(train[step * s["batch"] : (step + 1) * s["batch"]])

    shallow, deeps, lrs, mid = s["depths"][0], s["depths"][1:], s["lrs"], s["mid_lr"]
    runs: Runs = {}
    for depth in deeps:
        for arm in PLACEMENTS:
            for lr in lrs:
                runs[arm, depth, lr] = _train_arm(arm, depth, lr, s, task, batches, held, trial.seed, lr == mid)
        for arm in BROKEN:
            for lr in lrs[-2:]:
                runs[arm, depth, lr] = _train_arm(arm, depth, lr, s, task, batches, held, trial.seed, lr == mid)
    for arm in ("pre", "post", "no_residual"):
        runs[arm, shallow, mid] = _train_arm(arm, shallow, mid, s, task, batches, held, trial.seed, True)
    deep = deeps[-1]
    runs["large_init", deep, mid] = _train_arm("large_init", deep, mid, s, task, batches, held, trial.seed, False)
    runs["high_lr", deep, 10 * mid] = _train_arm("pre", deep, 10 * mid, s, task, batches, held, trial.seed, False)

    u = task.uniform
    out: dict[str, float] = {
        "depth_deep": deep,
        "depth_shallow": shallow,
        "uniform": u,
        "floor": task.floor,
        "n_lrs": len(lrs),
    }

    def at(arm: str, depth: int = deep, lr: float = mid) -> dict[str, Any]:
        return runs[arm, depth, lr]

    for arm in PLACEMENTS:
        finals = [_capped(at(arm, lr=lr)["stats"], u) for lr in lrs]
        out[f"lr_spread_{arm}"] = max(finals) - min(finals)
        out[f"best_{arm}"] = min(finals)
        out[f"failed_{arm}"] = sum(at(arm, lr=lr)["stats"]["failed"] for lr in lrs)
        out[f"nan_or_osc_{arm}"] = sum(
            bool(at(arm, lr=lr)["stats"]["nan"]) or at(arm, lr=lr)["stats"]["spike"] > OSCILLATION for lr in lrs
        )
        out[f"spike_{arm}"] = sum(min(at(arm, lr=lr)["stats"]["spike"], u) for lr in lrs) / len(lrs)
        out[f"rough_{arm}"] = sum(at(arm, lr=lr)["stats"]["rough"] for lr in lrs) / len(lrs)
        out[f"final_{arm}_mid"] = _capped(at(arm)["stats"], u)
        out[f"grad_ratio_{arm}_init"] = at(arm)["grad_init"][0] / at(arm)["grad_init"][-1]
        out[f"grad_ratio_{arm}_trained"] = at(arm)["grad"][0] / at(arm)["grad"][-1]
        out[f"rms_growth_{arm}_init"] = at(arm)["rms_init"][-1] / at(arm)["rms_init"][0]
        out[f"rms_growth_{arm}"] = at(arm)["rms"][-1] / at(arm)["rms"][0]
        out[f"highway_gain_{arm}_init"] = at(arm)["highway_init"][0] / at(arm)["highway_init"][-1]
        out[f"highway_gain_{arm}"] = at(arm)["highway"][0] / at(arm)["highway"][-1]
    for arm in BROKEN:
        arm_lrs = lrs[-2:]
        out[f"failed_{arm}"] = sum(at(arm, lr=lr)["stats"]["failed"] for lr in arm_lrs)
        out[f"nan_or_osc_{arm}"] = sum(
            bool(at(arm, lr=lr)["stats"]["nan"]) or at(arm, lr=lr)["stats"]["spike"] > OSCILLATION for lr in arm_lrs
        )
        out[f"excess_{arm}"] = sum(
            _capped(at(arm, lr=lr)["stats"], u) - _capped(at("pre", lr=lr)["stats"], u) for lr in arm_lrs
        ) / len(arm_lrs)
        out[f"final_{arm}_mid"] = _capped(at(arm)["stats"], u)
        out[f"nan_{arm}"] = sum(at(arm, lr=lr)["stats"]["nan"] for lr in arm_lrs)
    out["broken_runs"] = 2 * len(lrs[-2:])
    out["nan_or_osc_pre_same_lrs"] = sum(
        bool(at("pre", lr=lr)["stats"]["nan"]) or at("pre", lr=lr)["stats"]["spike"] > OSCILLATION for lr in lrs[-2:]
    )
    # C34: degradation and vanishing gradients with and without the residual
    out["final_pre_shallow"] = _capped(at("pre", shallow)["stats"], u)
    out["final_post_shallow"] = _capped(at("post", shallow)["stats"], u)
    out["final_no_residual_shallow"] = _capped(at("no_residual", shallow)["stats"], u)
    out["degradation_no_residual"] = out["final_no_residual_mid"] - out["final_no_residual_shallow"]
    out["degradation_residual"] = out["final_pre_mid"] - out["final_pre_shallow"]
    out["grad_ratio_no_residual_init"] = at("no_residual")["grad_init"][0] / at("no_residual")["grad_init"][-1]
    out["grad_ratio_no_residual_trained"] = at("no_residual")["grad"][0] / at("no_residual")["grad"][-1]
    out["token_cos_no_residual_init"] = at("no_residual")["cos_init"]
    out["token_cos_pre_init"] = at("pre")["cos_init"]
    # C39: attention-score spread with and without LayerNorm (last layer, trained at the middle rate)
    out["score_std_layernorm"] = at("pre")["score_std"]
    out["score_std_no_norm"] = at("no_norm")["score_std"]
    # C55: one factor at a time away from the healthy Pre-Norm run
    for name, key in (("large_init", ("large_init", deep, mid)), ("high_lr", ("high_lr", deep, 10 * mid))):
        st = runs[key]["stats"]
        out[f"failed_{name}"], out[f"spike_{name}"] = st["failed"], min(st["spike"], u)
        out[f"nan_{name}"], out[f"final_{name}"] = st["nan"], _capped(st, u)
    out["failed_post_any_lr"] = float(out["failed_post"] > 0)
    out["failed_pre_mid"] = at("pre")["stats"]["failed"]

    _draw_grid(trial, runs, s, task, deeps, shallow)
    return finite_metrics(out)


def _draw_grid(
    trial: Trial, runs: Runs, s: dict[str, Any], task: MarkovTask, deeps: Sequence[int], shallow: int
) -> None:
    lrs, mid, deep = s["lrs"], s["mid_lr"], deeps[-1]
    path = trial.figure_path("C44-loss-curves-by-depth-and-lr")
    if path is not None:

        def draw(axes: list[Any]) -> None:
            for r, depth in enumerate(deeps):
                for c, lr in enumerate(lrs):
                    ax = axes[r * len(lrs) + c]
                    for (arm, d, rate), rec in runs.items():
                        if d != depth or rate != lr or arm in ("large_init", "high_lr"):
                            continue
                        color, ls = ARM_STYLE[arm]
                        y = torch.tensor(rec["losses"], device="cpu")
                        ax.plot(y.clamp(max=task.uniform * 1.6).numpy(), color=color, ls=ls, lw=1.2, label=arm)
                        bad = torch.nonzero(~torch.isfinite(y))
                        if len(bad):
                            ax.plot(int(bad[0]), task.uniform * 1.55, "x", color=color, ms=9, mew=2)
                    ax.axhline(task.floor, color="k", ls=":", lw=0.8)
                    ax.axhline(task.uniform, color="0.5", ls="-.", lw=0.8)
                    ax.set(title=f"{depth} layers, lr={lr:g}", ylim=(0, task.uniform * 1.6), xlabel="step")
                    if c == 0:
                        ax.set_ylabel("train loss (nats)")
            axes[len(lrs) - 1].legend(fontsize=7, loc="lower left")
            axes[0].text(0, task.uniform * 1.5, "× = loss became NaN (curves clipped at the top)", fontsize=7)

        figure(path, draw, grid=(len(deeps), len(lrs)), size=(4 * len(lrs), 3.3 * len(deeps)), sharey=True)

    path = trial.figure_path("C43-residual-rms-and-gradient-per-layer")
    if path is not None:

        def draw_layers(axes: list[Any]) -> None:
            rms_ax, grad_ax, hw_ax = axes
            layers = list(range(1, deep + 1))
            for arm in (*PLACEMENTS, "no_residual"):
                rec = runs[arm, deep, mid]
                color, _ = ARM_STYLE[arm]
                rms_ax.plot(layers, rec["rms_init"], color=color, ls="--", marker=".")
                rms_ax.plot(layers, rec["rms"], color=color, ls="-", marker="o", label=arm)
                grad_ax.plot(layers, rec["grad_init"], color=color, ls="--", marker=".")
                grad_ax.plot(layers, rec["grad"], color=color, ls="-", marker="o", label=arm)
                if arm in PLACEMENTS:
                    hw = torch.tensor(rec["highway"], device="cpu")
                    hw_ax.plot(layers, (hw / hw[-1]).numpy(), color=color, marker="o", label=arm)
            rms_ax.set(
                yscale="log",
                xlabel="after block",
                ylabel="RMS of the residual stream",
                title=f"Residual stream size ({deep} layers, lr={mid:g})\ndashed: at init, solid: trained",
            )
            grad_ax.set(
                yscale="log",
                xlabel="into block",
                ylabel="‖∂loss/∂x‖ (RMS per token)",
                title="Total gradient reaching each layer\ndashed: at init, solid: trained",
            )
            hw_ax.axhline(1.0, color="k", ls=":", lw=0.8)
            hw_ax.set(
                yscale="log",
                xlabel="into block",
                ylabel="gradient ÷ gradient into the last block",
                title="Along the skip path only (sub-layers frozen)\nflat at 1 = an undamped highway",
            )
            rms_ax.legend(fontsize=8)
            hw_ax.legend(fontsize=8)

        figure(path, draw_layers, grid=(1, 3), size=(15, 4.3))

    path = trial.figure_path("C44-lr-sensitivity")
    if path is not None:

        def draw_lr(ax: Any) -> None:
            for arm in PLACEMENTS:
                color, _ = ARM_STYLE[arm]
                for depth, marker in zip(deeps, "os^"):
                    ys = [_capped(runs[arm, depth, lr]["stats"], task.uniform) for lr in lrs]
                    ax.plot(lrs, ys, color=color, marker=marker, label=f"{arm}, {depth} layers")
            ax.axhline(task.floor, color="k", ls=":", lw=0.8, label="best possible")
            ax.axhline(task.uniform, color="0.5", ls="-.", lw=0.8, label="uniform guess")
            ax.set(
                xscale="log",
                xlabel="learning rate (no warm-up, no clipping)",
                ylabel="final train loss",
                title=f"Sensitivity to the learning rate after {s['steps']} steps",
            )
            ax.legend(fontsize=7)

        figure(path, draw_lr)
