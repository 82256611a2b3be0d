"""§4: residual connections and normalisation (claims C33–C45). The central experiment, ``norm-depth-grid``
(Pre-/Post-Norm/DeepNorm across depth and learning rate; C33, C34, C36, C37, C39, C43–C45), is in ``norm_depth``;
here are the three smaller ones:

``identity-mlp``         learning F(x) = 0 (residual MLP) vs learning the identity (plain MLP) (C35).
``bn-vs-ln``             BatchNorm vs LayerNorm on padded variable-length batches (C38).
``layernorm-reference``  the LayerNorm formula against the library and torch (C40), the variants C41 might mean,
                         and Post-Norm against torch's paper-default encoder layer (C42).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from anatomy import ModelConfig, build_model, pitfalls
from anatomy.components.norms import LayerNorm
from anatomy.experiments.devices import cpu_draws, on, to_device
from anatomy.experiments.figures import figure
from anatomy.experiments.fitting import POST_SIZES, budget, curve_stats, finite_metrics, fit
from anatomy.experiments.registry import Metric, Trial, Verdict, claim, experiment
from anatomy.experiments.rules import TOL, count_seeds, num, per_seed, setting
from anatomy.experiments.tasks import MarkovTask

# --- C35: identity vs zero ---------------------------------------------------------------------------------------


class _ResidualMLP(nn.Module):
    def __init__(self, width: int, blocks: int) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width)) for _ in range(blocks)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for f in self.blocks:
            x = x + f(x)
        return x


IDENTITY_EPS = 0.01  # C35: MSE to the identity below which y = x counts as learnt
FASTER = 2  # C35: the residual stack must get there in at most 1/FASTER of the plain stack's steps


@experiment("identity-mlp", units={"steps_plain": " steps", "steps_residual": " steps"})
def identity_mlp(trial: Trial) -> dict[str, float]:
    width, blocks = 32, budget(trial.preset, 3, 4, 6)
    steps, eps = budget(trial.preset, 80, 400, 2000), IDENTITY_EPS
    dev = trial.device
    torch.manual_seed(trial.seed)
    with cpu_draws():  # initial weights and data from the CPU's generators, then moved to the trial's device
        layers = []
        for i in range(2 * blocks):
            layers += [nn.Linear(width, width)] + ([nn.ReLU()] if i < 2 * blocks - 1 else [])
        models = {
            "plain": nn.Sequential(*layers).to(dev),
            "residual": _ResidualMLP(width, blocks).to(dev),
        }  # same Linear count and init
        g = torch.Generator().manual_seed(trial.seed)
        data = torch.randn(steps, 128, width, generator=g).to(dev)
        test = torch.randn(1024, width, generator=g).to(dev)
    out, curves = {}, {}
    for name, model in models.items():
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        with torch.no_grad():
            out[f"mse0_{name}"] = (model(test) - test).pow(2).mean().item()
        reached, curve = steps, []
        for step in range(steps):
            loss = (model(data[step]) - data[step]).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            curve.append(loss.item())
            if reached == steps and loss.item() < eps:
                reached = step + 1
        with torch.no_grad():
            out[f"final_mse_{name}"] = (model(test) - test).pow(2).mean().item()
        out[f"steps_{name}"] = reached
        curves[name] = curve
    out["steps_cap"] = steps

    def draw(ax: Any) -> None:
        for name, c in curves.items():
            ax.plot(c, label=f"{name} MLP ({2 * blocks} Linear layers)")
        ax.axhline(eps, color="k", ls=":", lw=0.8, label=f"ε = {eps}")
        ax.set(
            yscale="log",
            xlabel="step",
            ylabel="MSE to the identity",
            title="Learning y = x: plain stack vs residual stack (F(x) → 0)",
        )
        ax.legend(fontsize=8)

    figure(trial.figure_path("C35-identity-vs-zero"), draw)
    return finite_metrics(out)


@claim(
    "C35-zero-easier-than-identity",
    experiment="identity-mlp",
    metrics=(
        "steps_plain",
        "steps_residual",
        "steps_cap",
        "final_mse_plain",
        "final_mse_residual",
        "mse0_plain",
        "mse0_residual",
    ),
    rule_text="Two ReLU MLPs with the same Linear layers and PyTorch's default init learn y = x (Adam, lr 1e-3): a "
    "plain stack, and a residual stack x + F(x) that must drive F to 0. Supported if the residual one "
    f"reaches MSE < {IDENTITY_EPS} in at most 1/{FASTER} of the steps and ends lower on every seed; "
    "refuted if it is not faster on any seed; otherwise inconclusive.",
)
def _c35(ms: dict[str, Metric]) -> Verdict:
    sp, sr = ms["steps_plain"], ms["steps_residual"]
    cap = setting(ms, "steps_cap")
    nums_en = (
        f"Steps to reach MSE < {IDENTITY_EPS} (cap {cap}): plain {sp.fmt()}, residual {sr.fmt()}; final MSE "
        f"{ms['final_mse_plain'].fmt()} vs {ms['final_mse_residual'].fmt()} (at init {ms['mse0_plain'].fmt()} "
        f"vs {ms['mse0_residual'].fmt()})."
    )
    nums_zh = (
        f"MSE 降到 {IDENTITY_EPS} 以下所需步数（上限 {cap}）：普通网络 {sp.fmt()}，残差网络 {sr.fmt()}；最终 "
        f"MSE {ms['final_mse_plain'].fmt()} 对 {ms['final_mse_residual'].fmt()}（初始化时 "
        f"{ms['mse0_plain'].fmt()} 对 {ms['mse0_residual'].fmt()}）。"
    )
    faster, n = count_seeds(
        ms,
        ("steps_plain", "steps_residual", "final_mse_plain", "final_mse_residual"),
        lambda p, r, fp, fr: FASTER * r <= p and fr < fp,
    )
    slower, _ = count_seeds(ms, ("steps_plain", "steps_residual"), lambda p, r: r >= p)
    if faster == n:
        return Verdict(
            "supported",
            nums_en + f" The residual stack got there in at most 1/{FASTER} of the steps and ended lower.",
            nums_zh + f"残差网络所需步数不到普通网络的 1/{FASTER}，且最终更低。",
        )
    if slower == n:
        return Verdict("refuted", nums_en + " The residual stack was not faster.", nums_zh + "残差网络并没有更快。")
    return Verdict(
        "inconclusive",
        nums_en + f" The advantage is below {FASTER}× or differs between seeds.",
        nums_zh + f"优势不到 {FASTER} 倍或各种子不一致。",
    )


# --- C38: BatchNorm vs LayerNorm -----------------------------------------------------------------------------------

BATCH_DEPENDENT = 1e-4  # C38: a relative logit change above this when the batch changes: batch-dependent
PER_SAMPLE = 1e-6  # C38: below this: independent of the batch (float32 noise)
RISE = 0.2  # C38: nats: BN's training curve rising this much more than LN's counts as unstable


def _padded(task: MarkovTask, n: int, T: int, g: torch.Generator, device: str = "cpu") -> dict[str, torch.Tensor]:
    with cpu_draws():
        ids = task.sample(n, T, g)
        lengths = torch.randint(T // 4, T + 1, (n,), generator=g)
        mask = torch.arange(T)[None] < lengths[:, None]
        batch = task.batch(ids.masked_fill(~mask, 0))
        batch["labels"] = batch["labels"].masked_fill(~mask, -100)
        batch["attention_mask"] = mask.long()
    return to_device(batch, device)


def _dependence(model: nn.Module, a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], train_mode: bool) -> float:
    """Put sequence 0 of ``a`` into batch ``b`` (other sentences, other padding): how much do its logits move?"""
    mixed = {k: torch.cat([a[k][:1], b[k][1:]]) for k in ("input_ids", "attention_mask")}
    model.train(train_mode)
    with torch.no_grad():
        x = model(input_ids=a["input_ids"], attention_mask=a["attention_mask"]).logits[0]
        y = model(**mixed).logits[0]
    valid = a["attention_mask"][0].bool()
    model.eval()
    return float(((x - y)[valid].abs().max() / x[valid].abs().max()).item())


@experiment("bn-vs-ln")
def bn_vs_ln(trial: Trial) -> dict[str, float]:
    T, steps = budget(trial.preset, 16, 32, 32, POST_SIZES["T"]), budget(trial.preset, 30, 200, 800)
    batch = 4  # small batches (§4.2)
    d_model = budget(trial.preset, 32, 32, 32, POST_SIZES["d_model"])
    n_heads = budget(trial.preset, 4, 4, 4, POST_SIZES["n_heads"])
    task = MarkovTask(vocab=16, lags=(2,), p=0.9, seed=trial.seed)
    g = torch.Generator().manual_seed(trial.seed)
    train = [_padded(task, batch, T, g, trial.device) for _ in range(steps)]
    val = [_padded(task, 32, T, g, trial.device) for _ in range(4)]
    out, curves = {}, {}
    for arm in ("ln", "bn"):
        torch.manual_seed(trial.seed)
        with cpu_draws():  # initialised on the CPU (with the BatchNorm swapped in there), then moved
            model = build_model(
                ModelConfig(
                    vocab_size=task.vocab,
                    d_model=d_model,
                    n_heads=n_heads,
                    n_layers=2,
                    max_seq_len=T,
                    init="xavier",
                    scale_embeddings=True,
                )
            )
            if arm == "bn":
                pitfalls.apply(model, "batchnorm_instead_of_layernorm")  # stays on: this model is the BatchNorm one
        model = model.to(trial.device)
        curves[arm] = fit(model, lambda step: train[step], steps, lr=3e-3)
        stats = curve_stats(curves[arm], uniform=task.uniform)
        out[f"spike_{arm}"], out[f"final_train_{arm}"] = min(stats["spike"], task.uniform), stats["final"]
        with torch.no_grad():
            model.eval()
            out[f"val_{arm}"] = sum(model(**v).loss.item() for v in val) / len(val)
            model.train()
            out[f"val_batchstats_{arm}"] = sum(model(**v).loss.item() for v in val) / len(val)
            model.eval()
        out[f"train_eval_gap_{arm}"] = abs(out[f"val_{arm}"] - out[f"val_batchstats_{arm}"])
        out[f"dep_train_{arm}"] = _dependence(model, val[0], val[1], True)
        out[f"dep_eval_{arm}"] = _dependence(model, val[0], val[1], False)

    def draw(ax: Any) -> None:
        for arm, label in (("ln", "LayerNorm"), ("bn", "BatchNorm over tokens")):
            ax.plot(curves[arm], label=f"{label}: val {out[f'val_{arm}']:.3f}")
        ax.axhline(task.floor, color="k", ls=":", lw=0.8)
        ax.set(
            xlabel="step",
            ylabel="train loss (nats)",
            title=f"Padded variable-length batches of {batch} sentences: LN vs BN",
        )
        ax.legend(fontsize=8)

    figure(trial.figure_path("C38-batchnorm-vs-layernorm"), draw)
    return finite_metrics(out)


@claim(
    "C38-layernorm-not-batchnorm",
    experiment="bn-vs-ln",
    metrics=(
        "dep_train_bn",
        "dep_train_ln",
        "dep_eval_bn",
        "val_ln",
        "val_bn",
        "train_eval_gap_bn",
        "spike_ln",
        "spike_bn",
    ),
    rule_text="Same LM on small right-padded batches (4 sentences of random lengths), LayerNorm vs the zoo's "
    "batchnorm_instead_of_layernorm. The exact half: BN must move a sentence's logits when its batch "
    f"changes (> {num(BATCH_DEPENDENT)}) and LN must not (< {num(PER_SAMPLE)}), else refuted (BN never "
    f"does) or inconclusive. Then supported if, on every seed, BN ends > {TOL} nats worse on validation, "
    f"or its curve rises > {RISE} nats more, or its loss differs by > {TOL} between batch and running "
    "statistics; nuanced if none of these on any seed; otherwise inconclusive.",
)
def _c38(ms: dict[str, Metric]) -> Verdict:
    exact = all(b > BATCH_DEPENDENT and a < PER_SAMPLE for a, b in per_seed(ms, "dep_train_ln", "dep_train_bn"))
    nums_en = (
        f"Moving one sentence into another batch changes its logits by {ms['dep_train_bn'].fmt()} (relative) "
        f"with BatchNorm in training mode and {ms['dep_train_ln'].fmt()} with LayerNorm (in eval mode BN uses "
        f"running statistics: {ms['dep_eval_bn'].fmt()}). Validation loss LN {ms['val_ln'].fmt()} vs BN "
        f"{ms['val_bn'].fmt()}; BN's loss moves by {ms['train_eval_gap_bn'].fmt()} between batch and running "
        f"statistics; largest rise in the training curve LN {ms['spike_ln'].fmt()} vs BN "
        f"{ms['spike_bn'].fmt()}."
    )
    nums_zh = (
        f"把一个句子放进另一个 batch，训练模式下 BatchNorm 使其 logits 相对变化 {ms['dep_train_bn'].fmt()}，"
        f"LayerNorm 为 {ms['dep_train_ln'].fmt()}（评估模式下 BN "
        f"用滑动统计量：{ms['dep_eval_bn'].fmt()}）。验证 loss：LN {ms['val_ln'].fmt()}，BN "
        f"{ms['val_bn'].fmt()}；BN 在 batch 统计量与滑动统计量之间 loss 相差 "
        f"{ms['train_eval_gap_bn'].fmt()}；训练曲线最大回升 LN {ms['spike_ln'].fmt()}，BN "
        f"{ms['spike_bn'].fmt()}。"
    )
    if not exact:
        if all(b <= BATCH_DEPENDENT for b in ms["dep_train_bn"].values):
            return Verdict(
                "refuted",
                nums_en + f" BatchNorm did not move the logits by > {num(BATCH_DEPENDENT)}.",
                nums_zh + f"BatchNorm 没有让 logits 变化超过 {num(BATCH_DEPENDENT)}。",
            )
        return Verdict(
            "inconclusive",
            nums_en + f" The exact half failed on some seed (BN > {num(BATCH_DEPENDENT)} "
            f"and LN < {num(PER_SAMPLE)} needed).",
            nums_zh + f"精确部分在某个种子上不成立（需要 BN > {num(BATCH_DEPENDENT)} 且 LN < {num(PER_SAMPLE)}）。",
        )
    worse = [
        vb - vl > TOL or sb - sl > RISE or gap > TOL
        for vl, vb, sl, sb, gap in per_seed(ms, "val_ln", "val_bn", "spike_ln", "spike_bn", "train_eval_gap_bn")
    ]
    if all(worse):
        return Verdict(
            "supported",
            nums_en + f" On every seed BN ended > {TOL} nats worse, rose > {RISE} nats more, "
            f"or moved by > {TOL} between batch and running statistics.",
            nums_zh + f"每个种子上 BN 的验证 loss 差 {TOL} nat 以上、曲线多回升 {RISE} nat 以上，或 "
            "batch 与滑动"
            f"统计量之间相差 {TOL} 以上。",
        )
    if not any(worse):
        return Verdict(
            "nuanced",
            nums_en + " BatchNorm does depend on the batch and its padding, but on this task it "
            "trained about as well: the instability did not show.",
            nums_zh + "BatchNorm 确实依赖 batch 及其 padding，但在这个任务上训练效果相近：没有出现不稳定。",
        )
    return Verdict(
        "inconclusive",
        nums_en + " The seeds disagree on the training effect.",
        nums_zh + "各种子对训练影响的结论不一致。",
    )


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
