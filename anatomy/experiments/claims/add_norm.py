"""§4: residual connections and normalisation (claims C33–C45). The central experiment, ``norm-depth-grid``
(Pre-/Post-Norm/DeepNorm across depth and learning rate; C33, C34, C36, C37, C39, C43–C45), is in ``norm_depth``;
here are two of the smaller ones (the third, ``layernorm-reference``, C40–C42, is in ``layernorm_reference``):

``identity-mlp``         learning F(x) = 0 (residual MLP) vs learning the identity (plain MLP) (C35).
``bn-vs-ln``             BatchNorm vs LayerNorm on padded variable-length batches (C38).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from anatomy import ModelConfig, build_model, pitfalls
from anatomy.experiments.devices import cpu_draws, to_device
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
