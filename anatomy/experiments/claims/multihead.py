"""§1: multi-head attention and the sqrt(d_k) scale (claims C4–C6).

Experiments defined here:

C1–C3 are judged on ``head-count`` (head_count.py): the head-count sweep on three tasks.
``head-parameters``     C4.   ``dot-product-variance``  C5, C6.
C7 and C8, softmax saturation without the scale, are in saturation.py.
"""

from __future__ import annotations

from typing import Any

import torch

from anatomy.components import MultiHeadAttention
from anatomy.experiments.devices import on
from anatomy.experiments.figures import figure
from anatomy.experiments.fitting import budget
from anatomy.experiments.registry import Metric, Trial, Verdict, claim, experiment, holds_on_every_seed

SAME_PARAMS = 0.01  # C4: a relative parameter change below this is "no increase"
UNIT_VARIANCE = 0.1  # C5, C6: a variance within this relative distance of the target is "≈"
BEYOND_8 = 0.1  # C5: at least this share of the dot products beyond ±8 is "many"


@experiment("head-parameters")
def head_parameters(trial: Trial) -> dict[str, float]:
    """Parameters of one attention layer at D=512 for h in {1, 8, 64}: the projections do not depend on h."""
    counts = {
        h: sum(p.numel() for p in on(trial.device, MultiHeadAttention, d_model=512, n_heads=h).parameters())
        for h in (1, 8, 64)
    }

    def draw(ax: Any) -> None:
        ax.bar([str(h) for h in counts], list(counts.values()))
        ax.set(xlabel="heads h (D = 512)", ylabel="parameters", title="Attention parameters vs number of heads")

    figure(trial.figure_path("C4-head-parameters"), draw)
    return {
        "params_h1": counts[1],
        "params_h8": counts[8],
        "params_h64": counts[64],
        "relative_increase_h64_vs_h1": counts[64] / counts[1] - 1,
    }


claim(
    "C4-multihead-parameters",
    experiment="head-parameters",
    metrics=("params_h1", "params_h8", "params_h64", "relative_increase_h64_vs_h1"),
    rule_text=f"supported if the relative parameter change from h=1 to h=64 at D=512 is below {SAME_PARAMS:.0%}; "
    "the expressiveness half of the claim is measured by C2/C12.",
)(
    holds_on_every_seed(
        "relative_increase_h64_vs_h1",
        lambda v: abs(v) < SAME_PARAMS,
        "Going from 1 to 64 heads at D=512 changes the parameter count by {value} (relative): the heads split the same "
        "projections, they do not add any.",
        "在 D=512 时从 1 个头到 64 个头，参数量的相对变化为 {value}：多个头切分同一组投影，并不增加参数。",
    )
)


@experiment("dot-product-variance")
def dot_product_variance(trial: Trial) -> dict[str, float]:
    """Monte-Carlo: q, k with iid unit-variance entries; Var(q.k) and Var(q.k/sqrt(d_k)) for d_k in {16, 64, 256}."""
    n = budget(trial.preset, 2_000, 50_000, 200_000)
    g = torch.Generator().manual_seed(trial.seed)
    out = {}
    for dk in (16, 64, 256):
        q = on(trial.device, torch.randn, n, dk, generator=g, dtype=torch.float64)
        k = on(trial.device, torch.randn, n, dk, generator=g, dtype=torch.float64)
        dots = (q * k).sum(-1)
        out[f"var_ratio_dk{dk}"] = dots.var().item() / dk
        out[f"scaled_var_dk{dk}"] = (dots / dk**0.5).var().item()
        if dk == 64:
            out["frac_beyond_8_dk64"] = (dots.abs() > 8).double().mean().item()
            sample = dots[:2000].cpu()

    def draw(ax: Any) -> None:
        ax.hist(sample.numpy(), bins=60, alpha=0.6, label="q·k (d_k=64)")
        ax.hist((sample / 8).numpy(), bins=60, alpha=0.6, label="q·k / sqrt(64)")
        ax.axvline(8, color="k", ls=":")
        ax.axvline(-8, color="k", ls=":")
        ax.legend()
        ax.set(title="Dot products of random unit-variance vectors", xlabel="value")

    figure(trial.figure_path("C5-dot-product-variance"), draw)
    return out


@claim(
    "C5-dot-variance",
    experiment="dot-product-variance",
    metrics=("var_ratio_dk16", "var_ratio_dk64", "var_ratio_dk256", "frac_beyond_8_dk64"),
    rule_text=f"supported if Var(q·k)/d_k is within {UNIT_VARIANCE:.0%} of 1 for every d_k and at least "
    f"{BEYOND_8:.0%} of the dot products exceed ±8 at d_k=64; nuanced if the variance holds but fewer "
    "exceed ±8; refuted otherwise.",
)
def _c5(ms: dict[str, Metric]) -> Verdict:
    from anatomy.experiments.registry import Verdict

    ratios_ok = all(
        abs(v - 1) < UNIT_VARIANCE
        for k in ("var_ratio_dk16", "var_ratio_dk64", "var_ratio_dk256")
        for v in ms[k].values
    )
    beyond = ms["frac_beyond_8_dk64"]
    if ratios_ok and min(beyond.values) >= BEYOND_8:
        return Verdict(
            "supported",
            f"Var(q·k)/d_k = {ms['var_ratio_dk64'].fmt()} at d_k=64, and {beyond.fmt()} of the "
            "dot products lie beyond ±8 (one standard deviation).",
            f"d_k=64 时 Var(q·k)/d_k = {ms['var_ratio_dk64'].fmt()}，{beyond.fmt()} 的点积超出 ±8（一个标准差）。",
        )
    if ratios_ok:
        return Verdict(
            "nuanced",
            f"The variance is ≈ d_k ({ms['var_ratio_dk64'].fmt()} × d_k), but only "
            f"{beyond.fmt()} of the values exceed ±8 (fewer than {BEYOND_8:.0%} on some seed).",
            f"方差约等于 d_k（{ms['var_ratio_dk64'].fmt()} 倍），但只有 {beyond.fmt()} 超出 ±8"
            f"（某个种子上不到 {BEYOND_8:.0%}）。",
        )
    return Verdict(
        "refuted",
        f"Var(q·k)/d_k = {ms['var_ratio_dk64'].fmt()} at d_k=64: not within {UNIT_VARIANCE:.0%} of 1 for every d_k.",
        f"d_k=64 时 Var(q·k)/d_k = {ms['var_ratio_dk64'].fmt()}：并非每个 d_k 都在 1 的 {UNIT_VARIANCE:.0%} 以内。",
    )


claim(
    "C6-scaling-restores-unit-variance",
    experiment="dot-product-variance",
    metrics=("scaled_var_dk16", "scaled_var_dk64", "scaled_var_dk256"),
    rule_text=f"supported if Var(q·k/sqrt(d_k)) at d_k=64 is within {UNIT_VARIANCE:.0%} of 1 on every seed (iid "
    "unit-variance inputs); refuted if on none; inconclusive otherwise.",
)(
    holds_on_every_seed(
        "scaled_var_dk64",
        lambda v: abs(v - 1) < UNIT_VARIANCE,
        "With iid unit-variance entries, Var(q·k / sqrt(d_k)) = {value} at d_k=64 (≈ 1 for every d_k tested).",
        "q、k 各分量独立且方差为 1 时，d_k=64 的 Var(q·k/sqrt(d_k)) = {value}（≈1）。",
    )
)
