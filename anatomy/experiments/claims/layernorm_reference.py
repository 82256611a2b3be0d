"""§4: LayerNorm and Post-Norm against the references (claims C40, C41, C42).

``layernorm-reference``  the LayerNorm formula against the library and torch (C40), the variants C41 might mean,
                         and Post-Norm against torch's paper-default encoder layer (C42).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from anatomy.components.norms import LayerNorm
from anatomy.experiments.devices import cpu_draws, on
from anatomy.experiments.fitting import finite_metrics
from anatomy.experiments.registry import Metric, Trial, Verdict, claim, experiment

# --- C40, C41, C42: LayerNorm and Post-Norm against the references --------------------------------------------


@experiment("layernorm-reference")
def layernorm_reference(trial: Trial) -> dict[str, float]:
    from anatomy.interop.torch_nn import from_torch

    g = torch.Generator().manual_seed(trial.seed)
    d, eps, dev = 64, 1e-5, trial.device
    with cpu_draws():
        x = (torch.randn(4, 10, d, generator=g, dtype=torch.float64) * 3 + 2).to(dev)
        gamma = torch.randn(d, generator=g, dtype=torch.float64).to(dev)
        beta = torch.randn(d, generator=g, dtype=torch.float64).to(dev)
    mean, var = x.mean(-1, keepdim=True), x.var(-1, unbiased=False, keepdim=True)
    formula = gamma * (x - mean) / torch.sqrt(var + eps) + beta
    ours = on(dev, lambda: LayerNorm(d, eps=eps).double())
    theirs = on(dev, lambda: nn.LayerNorm(d, eps=eps).double())
    with torch.no_grad():
        for m in (ours, theirs):
            m.weight.copy_(gamma)
            assert m.bias is not None  # both are built with a bias
            m.bias.copy_(beta)
        out = {
            "err_ours_vs_formula": (ours(x) - formula).abs().max().item(),
            "err_torch_vs_formula": (theirs(x) - formula).abs().max().item(),
        }
    unbiased = gamma * (x - mean) / torch.sqrt(x.var(-1, keepdim=True) + eps) + beta
    out["diff_unbiased_variance"] = (unbiased - formula).abs().max().item()
    m1, v1 = x.mean(1, keepdim=True), x.var(1, unbiased=False, keepdim=True)
    out["diff_wrong_dim"] = (gamma * (x - m1) / torch.sqrt(v1 + eps) + beta - formula).abs().max().item()
    # C41: the documented variant of a famous re-implementation (Annotated Transformer: unbiased std, eps outside)
    annotated = gamma * (x - mean) / (x.std(-1, keepdim=True) + eps) + beta
    out["diff_std_plus_eps_variant"] = (annotated - formula).abs().max().item()
    # C41: the only 'order of the mean' effect we can measure: float32 rounding of different summation orders
    x32 = x.float()
    orders = [x32.mean(-1), x32.sum(-1) / d, x32.flip(-1).cumsum(-1)[..., -1] / d, (x32 / d).sum(-1)]
    out["diff_mean_order_fp32"] = max((a - orders[0]).abs().max().item() for a in orders[1:])
    # C42: Post-Norm = LayerNorm(x + Sublayer(x)), against torch's encoder layer (norm_first=False, the paper's)
    torch.manual_seed(trial.seed)
    with cpu_draws():
        layer = nn.TransformerEncoderLayer(16, 4, 64, dropout=0.0, batch_first=True).double().eval()
        block: Any = from_torch(layer).eval()  # an EncoderBlock
        h = torch.randn(2, 10, 16, generator=g, dtype=torch.float64)
    layer, block, h = layer.to(dev), block.to(dev), h.to(dev)
    with torch.no_grad():
        sub = layer.norm1(h + layer.self_attn(h, h, h, need_weights=False)[0])
        by_hand = layer.norm2(sub + layer.linear2(torch.relu(layer.linear1(sub))))
        out["post_norm_parity_err"] = (block(h)[0] - layer(h)).abs().max().item()
        out["post_norm_formula_err"] = (layer(h) - by_hand).abs().max().item()
    out["placement_is_post"] = float(block.attn_add_norm.placement == "post")
    return finite_metrics(out)


@claim(
    "C40-layernorm-formula",
    experiment="layernorm-reference",
    metrics=("err_ours_vs_formula", "err_torch_vs_formula", "diff_unbiased_variance", "diff_wrong_dim"),
    rule_text="Supported if the formula (biased variance, last dimension) matches both our LayerNorm and "
    "torch.nn.LayerNorm to < 1e-10 in float64; refuted otherwise.",
)
def _c40(ms: dict[str, Metric]) -> Verdict:
    a, b = ms["err_ours_vs_formula"], ms["err_torch_vs_formula"]
    if max(a.values) < 1e-10 and max(b.values) < 1e-10:
        return Verdict(
            "supported",
            "The formula with the biased variance over the last dimension equals our LayerNorm "
            f"to {a.fmt()} and torch's to {b.fmt()} (float64). Using the unbiased variance would change "
            f"outputs by {ms['diff_unbiased_variance'].fmt()}; normalising over the sequence dimension "
            f"instead by {ms['diff_wrong_dim'].fmt()}.",
            f"按最后一维、有偏方差计算的公式与本库 LayerNorm 相差 {a.fmt()}，与 torch 相差 {b.fmt()}（"
            "float64）。"
            f"改用无偏方差会使输出变化 {ms['diff_unbiased_variance'].fmt()}；改在序列维上归一化会变化 "
            f"{ms['diff_wrong_dim'].fmt()}。",
        )
    return Verdict(
        "refuted",
        f"The formula differs from the implementations by {a.fmt()} / {b.fmt()}.",
        f"公式与实现相差 {a.fmt()} / {b.fmt()}。",
    )


@claim(
    "C41-original-layernorm-mean-order",
    experiment="layernorm-reference",
    metrics=("diff_std_plus_eps_variant", "diff_mean_order_fp32"),
    rule_text="Unverifiable as stated (no source is named): always inconclusive, with the nearest measurable "
    "variants reported.",
)
def _c41(ms: dict[str, Metric]) -> Verdict:
    v, o = ms["diff_std_plus_eps_variant"], ms["diff_mean_order_fp32"]
    return Verdict(
        "inconclusive",
        "The post names no code, version or line, so there is nothing to audit. What we can measure: "
        f"the best-known deviation in a popular re-implementation (Harvard's Annotated Transformer "
        f"divides by the unbiased std plus eps) changes outputs by {v.fmt()}, and computing the mean in "
        f"another order changes it only by float32 rounding ({o.fmt()}). Neither is a 'mean-ordering "
        "issue' of the original paper's code.",
        "原文没有指明代码、版本或行号，因此无从核查。能测量的是：一个流行复现（哈佛 Annotated Transformer 用"
        "无偏标准差加 eps"
        f"作分母）与公式的输出差 {v.fmt()}；换一种顺序计算均值只带来 float32 舍入误差（{o.fmt()}）。"
        "两者都不是原论文代码的“均值计算顺序问题”。",
    )


@claim(
    "C42-paper-is-post-norm",
    experiment="layernorm-reference",
    metrics=("post_norm_parity_err", "post_norm_formula_err", "placement_is_post"),
    rule_text="A fact about the paper (quoted in the reason); supported if torch's encoder layer with the paper's "
    "default equals LN(x + Sublayer(x)) by hand and our 'post' block to < 1e-10 (float64), else "
    "inconclusive.",
)
def _c42(ms: dict[str, Metric]) -> Verdict:
    par, form, post = ms["post_norm_parity_err"], ms["post_norm_formula_err"], ms["placement_is_post"]
    lit_en = (
        'Vaswani et al. (2017), §3.1: "the output of each sub-layer is LayerNorm(x + Sublayer(x))" — Post-Norm '
        "(the later tensor2tensor code switched its default to normalising the sub-layer input)."
    )
    lit_zh = (
        "Vaswani 等（2017）§3.1：“每个子层的输出是 LayerNorm(x + Sublayer(x))”——即 Post-Norm（后来 tensor2tensor "
        "代码的默认改成了先归一化子层输入）。"
    )
    if max(par.values) < 1e-10 and max(form.values) < 1e-10 and min(post.values) == 1:
        return Verdict(
            "supported",
            lit_en + " Measured: torch's paper-default layer equals LN(x + Sublayer(x)) "
            f"written by hand ({form.fmt()}) and our 'post' block ({par.fmt()}).",
            lit_zh + f"实测：torch 按论文默认的编码层等于手写的 LN(x + Sublayer(x))（{form.fmt()}），也等于"
            "本库的"
            f" post 结构（{par.fmt()}）。",
        )
    return Verdict(
        "inconclusive",
        lit_en + f" But our parity check failed ({par.fmt()}, {form.fmt()}).",
        lit_zh + f"但我们的一致性检查未通过（{par.fmt()}，{form.fmt()}）。",
    )
