"""§1: multi-head attention and the sqrt(d_k) scale (claims C1–C8)."""

from __future__ import annotations

import torch

from anatomy.components import MultiHeadAttention
from anatomy.experiments.common import budget, figure
from anatomy.experiments.registry import claim, experiment, holds_on_every_seed


@experiment("head-parameters")
def head_parameters(ctx):
    """Parameters of one attention layer at D=512 for h in {1, 8, 64}: the projections do not depend on h."""
    counts = {h: sum(p.numel() for p in MultiHeadAttention(d_model=512, n_heads=h).parameters()) for h in (1, 8, 64)}

    def draw(ax):
        ax.bar([str(h) for h in counts], list(counts.values()))
        ax.set(xlabel="heads h (D = 512)", ylabel="parameters", title="Attention parameters vs number of heads")
    figure(ctx.figure_path("C4-head-parameters"), draw)
    return {"params_h1": counts[1], "params_h8": counts[8], "params_h64": counts[64],
            "relative_increase_h64_vs_h1": counts[64] / counts[1] - 1}


claim("C4-multihead-parameters", section="§1.2",
      zh="Multi-Head在参数总量不大幅增加的情况下能显著提升模型表达能力",
      en="Multi-head attention adds expressiveness without a significant increase in parameters.",
      experiment="head-parameters", metrics=("params_h1", "params_h8", "params_h64", "relative_increase_h64_vs_h1"),
      rule=holds_on_every_seed(
          "relative_increase_h64_vs_h1", lambda v: abs(v) < 0.01,
          "Going from 1 to 64 heads at D=512 changes the parameter count by {value} (relative): the heads split "
          "the same projections, they do not add any.",
          "在 D=512 时从 1 个头到 64 个头，参数量的相对变化为 {value}：多个头切分同一组投影，并不增加参数。"),
      rule_text="supported if the relative parameter change from h=1 to h=64 at D=512 is below 1%; the "
                "expressiveness half of the claim is measured by C2/C12.")


@experiment("dot-product-variance")
def dot_product_variance(ctx):
    """Monte-Carlo: q, k with iid unit-variance entries; Var(q.k) and Var(q.k/sqrt(d_k)) for d_k in {16, 64, 256}."""
    n = budget(ctx.preset, 2_000, 50_000, 200_000)
    g = torch.Generator().manual_seed(ctx.seed)
    out = {}
    for dk in (16, 64, 256):
        q, k = torch.randn(n, dk, generator=g, dtype=torch.float64), torch.randn(n, dk, generator=g, dtype=torch.float64)
        dots = (q * k).sum(-1)
        out[f"var_ratio_dk{dk}"] = dots.var().item() / dk
        out[f"scaled_var_dk{dk}"] = (dots / dk**0.5).var().item()
        if dk == 64:
            out["frac_beyond_8_dk64"] = (dots.abs() > 8).double().mean().item()
            sample = dots[:2000]

    def draw(ax):
        ax.hist(sample.numpy(), bins=60, alpha=0.6, label="q·k (d_k=64)")
        ax.hist((sample / 8).numpy(), bins=60, alpha=0.6, label="q·k / sqrt(64)")
        ax.axvline(8, color="k", ls=":")
        ax.axvline(-8, color="k", ls=":")
        ax.legend()
        ax.set(title="Dot products of random unit-variance vectors", xlabel="value")
    figure(ctx.figure_path("C5-dot-product-variance"), draw)
    return out


claim("C5-dot-variance", section="§1.3",
      zh="如果d_k=64点积结果的方差大约是64这意味着很多值会落到±8甚至更大的范围",
      en="q·k has variance ≈ d_k; at d_k = 64 many values fall beyond ±8.",
      experiment="dot-product-variance", metrics=("var_ratio_dk16", "var_ratio_dk64", "var_ratio_dk256",
                                                  "frac_beyond_8_dk64"),
      rule=lambda ms: _c5(ms), rule_text="supported if Var(q·k)/d_k is within 10% of 1 for every d_k and at "
      "least 10% of the dot products exceed ±8 at d_k=64; nuanced if the variance holds but fewer exceed ±8.")


def _c5(ms):
    from anatomy.experiments.registry import Verdict

    ratios_ok = all(abs(v - 1) < 0.1 for k in ("var_ratio_dk16", "var_ratio_dk64", "var_ratio_dk256")
                    for v in ms[k].values)
    beyond = ms["frac_beyond_8_dk64"]
    if ratios_ok and min(beyond.values) >= 0.1:
        return Verdict("supported", f"Var(q·k)/d_k = {ms['var_ratio_dk64'].fmt()} at d_k=64, and {beyond.fmt()} of "
                       "the dot products lie beyond ±8 (one standard deviation).",
                       f"d_k=64 时 Var(q·k)/d_k = {ms['var_ratio_dk64'].fmt()}，{beyond.fmt()} 的点积超出 ±8（一个标准差）。")
    if ratios_ok:
        return Verdict("nuanced", f"The variance is ≈ d_k ({ms['var_ratio_dk64'].fmt()} × d_k), but only "
                       f"{beyond.fmt()} of the values exceed ±8.",
                       f"方差约等于 d_k（{ms['var_ratio_dk64'].fmt()} 倍），但只有 {beyond.fmt()} 超出 ±8。")
    return Verdict("refuted", f"Var(q·k)/d_k = {ms['var_ratio_dk64'].fmt()}: not ≈ 1.",
                   f"Var(q·k)/d_k = {ms['var_ratio_dk64'].fmt()}，并不约等于 1。")


claim("C6-scaling-restores-unit-variance", section="§1.3",
      zh="除以sqrt(d_k)的本质是把点积结果的方差重新拉回到1附近",
      en="Dividing by sqrt(d_k) brings the variance of the scores back to ≈ 1.",
      experiment="dot-product-variance", metrics=("scaled_var_dk16", "scaled_var_dk64", "scaled_var_dk256"),
      rule=holds_on_every_seed(
          "scaled_var_dk64", lambda v: abs(v - 1) < 0.1,
          "With iid unit-variance entries, Var(q·k / sqrt(d_k)) = {value} at d_k=64 (≈ 1 for every d_k tested).",
          "q、k 各分量独立且方差为 1 时，d_k=64 的 Var(q·k/sqrt(d_k)) = {value}（≈1）。"),
      rule_text="supported if Var(q·k/sqrt(d_k)) is within 10% of 1 on every seed (iid unit-variance inputs).")
