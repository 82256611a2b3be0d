"""§2.3: initialisation (claims C15, C16).

``init-training``        C8 (saturation.py), C15, C16: one character LM (d_k = 64) trained from several inits, with and
                         without the 1/sqrt(d_k) scale; attention and gradients at step 0.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from anatomy import pitfalls
from anatomy.experiments.devices import cpu_draws
from anatomy.experiments.figures import figure
from anatomy.experiments.fitting import budget, fit, mean_tail, tiny_model
from anatomy.experiments.probes import probe_attention
from anatomy.experiments.registry import Metric, Trial, Verdict, claim, experiment
from anatomy.experiments.rules import Case, Ladder, fmts, seed_verdict
from anatomy.experiments.tasks import LM_T, char_corpus, lm_batch

# =============================================================================================================
# init-training: C8, C15, C16
# =============================================================================================================

INIT_ARMS = ("torch_scaled", "torch_unscaled", "normal_scaled", "xavier_scaled", "large_scaled")
INIT_LABELS = {
    "torch_scaled": "PyTorch default init",
    "torch_unscaled": "PyTorch default, NO 1/sqrt(d_k)",
    "normal_scaled": "normal(0.02) (GPT-2)",
    "xavier_scaled": "Xavier",
    "large_scaled": "normal(0.02) ×50",
}


def _init_model(arm: str, vocab: int, seed: int, device: str = "cpu") -> nn.Module:
    torch.manual_seed(seed)
    with cpu_draws():  # every init on the CPU's generator, then moved
        model = tiny_model(
            d_model=64,
            n_heads=1,
            n_layers=1,
            vocab_size=vocab,
            max_seq_len=LM_T,
            tie_embeddings=False,
            init="xavier" if arm.startswith("xavier") else "normal",
        )
        if arm.startswith("torch"):  # every module's own default: nn.Linear kaiming-uniform, nn.Embedding N(0, 1)
            for m in model.modules():
                if isinstance(m, (torch.nn.Linear, torch.nn.Embedding)):
                    m.reset_parameters()
    model = model.to(device)
    if arm.startswith("large"):
        pitfalls.apply(model, "large_init_scale", factor=50.0)  # kept for the whole run
    if arm.endswith("unscaled"):
        pitfalls.apply(model, "no_scaling")
    return model


@experiment(
    "init-training",
    units={
        **{f"val_{a}": " nats" for a in INIT_ARMS},
        "unscaled_minus_scaled": " nats",
        "torch_minus_best": " nats",
        "large_minus_normal": " nats",
        "progress_after_q1_unscaled": " nats",
        "progress_after_q1_scaled": " nats",
        "step0_gradq_ratio_x50": "×",
        "step0_passthrough_ratio_x50": "×",
    },
)
def init_training(trial: Trial) -> dict[str, float]:
    train, val, vocab = char_corpus("shakespeare")
    steps = budget(trial.preset, 30, 250, 1500)
    dev = trial.device
    val_batches = [
        lm_batch(val, LM_T, 64, torch.Generator().manual_seed(777 + i), dev)
        for i in range(budget(trial.preset, 1, 4, 8))
    ]
    probe = lm_batch(val, LM_T, 16, torch.Generator().manual_seed(900 + trial.seed), dev)
    out, curves, step0 = {}, {}, {}
    for arm in INIT_ARMS:
        model = _init_model(arm, len(vocab), 100 * trial.seed + 7, dev)
        step0[arm] = probe_attention(model, probe)  # (max p, ‖∂L/∂W_q‖, score std) before any update
        g = torch.Generator().manual_seed(trial.seed)

        def batch(_s: int, g: torch.Generator = g) -> dict[str, torch.Tensor]:
            return lm_batch(train, LM_T, 32, g)

        curves[arm] = fit(model, batch, steps, lr=3e-3)
        with torch.no_grad():
            out[f"val_{arm}"] = sum(model(**b).loss.item() for b in val_batches) / len(val_batches)
    n = len(curves["torch_scaled"])
    q1 = slice(int(0.2 * n), max(int(0.3 * n), int(0.2 * n) + 1))
    for tag, arm in (("unscaled", "torch_unscaled"), ("scaled", "torch_scaled")):
        c = curves[arm]
        out[f"progress_after_q1_{tag}"] = sum(c[q1]) / len(c[q1]) - mean_tail(c)
    out["unscaled_minus_scaled"] = out["val_torch_unscaled"] - out["val_torch_scaled"]
    out["torch_minus_best"] = out["val_torch_scaled"] - min(
        out[f"val_{a}"] for a in ("torch_scaled", "normal_scaled", "xavier_scaled")
    )
    out["large_minus_normal"] = out["val_large_scaled"] - out["val_normal_scaled"]
    big, base = step0["large_scaled"], step0["normal_scaled"]
    out["step0_maxp_x1"], out["step0_maxp_x50"] = base["maxp"], big["maxp"]
    out["step0_maxp_torch"] = step0["torch_scaled"]["maxp"]
    out["step0_gradq_ratio_x50"] = big["gradq"] / base["gradq"]
    out["step0_passthrough_ratio_x50"] = big["passthrough"] / base["passthrough"]
    out["step0_score_std_x50"] = big["score_std"]
    _draw_init(trial, curves, step0)
    return out


def _draw_init(trial: Trial, curves: dict[str, list[float]], step0: dict[str, dict[str, float]]) -> None:
    path = trial.figure_path("C8-C15-C16-init-and-scale-training")

    def draw(axes: list[Any]) -> None:
        ax = axes[0]
        for i, (arm, c) in enumerate(curves.items()):
            w = max(1, len(c) // 30)
            smooth = [sum(c[j : j + w]) / w for j in range(0, len(c) - w + 1)]
            ax.plot(
                range(w - 1, len(c)),
                smooth,
                color=f"C{i}",
                ls="--" if "unscaled" in arm else "-",
                label=INIT_LABELS[arm],
            )
        ax.set(
            xlabel="step",
            ylabel="training loss (nats/char, smoothed)",
            title="Char LM, one head, d_k = 64: init and the 1/sqrt(d_k) scale",
        )
        ax.legend(fontsize=8)
        ax = axes[1]
        arms = list(step0)
        ax.bar(range(len(arms)), [step0[a]["maxp"] for a in arms], color=[f"C{i}" for i in range(len(arms))])
        uniform = sum(1 / (t + 1) for t in range(7, LM_T)) / (LM_T - 7)
        ax.axhline(uniform, color="gray", ls=":", lw=1, label="uniform attention")
        ax.legend(loc="upper left", fontsize=8)
        for i, a in enumerate(arms):
            ax.text(i, step0[a]["maxp"] + 0.02, f"‖∂L/∂W_q‖\n{step0[a]['gradq']:.2g}", ha="center", fontsize=7)
        ax.set(
            xticks=range(len(arms)),
            xticklabels=[INIT_LABELS[a].replace(" (GPT-2)", "").replace(", ", ",\n") for a in arms],
            ylim=(0, 1.15),
            ylabel="mean max attention prob at step 0",
            title="Before training: how one-hot is the attention?",
        )
        ax.tick_params(axis="x", labelsize=7)

    figure(path, draw, grid=(1, 2), size=(13, 4.6))


ENOUGH, NOT_ENOUGH = 0.05, 0.15  # C15: nats from the best init: 'enough' / 'not enough'
C15_RULE = Ladder(
    (
        Case(
            "supported",
            f"PyTorch's default init ends within {ENOUGH} nats of the best of {{default, normal(0.02), Xavier}}",
            f"PyTorch 默认初始化与三者中最好的相差不超过 {ENOUGH} nat",
            lambda gap: gap <= ENOUGH,
        ),
        Case(
            "refuted", f"it is ≥ {NOT_ENOUGH} nats worse", f"它差 {NOT_ENOUGH} nat 以上", lambda gap: gap >= NOT_ENOUGH
        ),
    ),
    otherwise="nuanced",
    otherwise_en=f"it is between {ENOUGH} and {NOT_ENOUGH} nats worse",
    otherwise_zh=f"它差 {ENOUGH} 到 {NOT_ENOUGH} nat 之间",
)


_C15_METRICS = (
    "val_torch_scaled",
    "val_normal_scaled",
    "val_xavier_scaled",
    "torch_minus_best",
)


@claim(
    "C15-default-init-enough",
    experiment="init-training",
    metrics=_C15_METRICS,
    rule_text=C15_RULE.text("Char LM, one head, same seed and batches."),
)
def _c15(ms: dict[str, Metric]) -> Verdict:
    f = fmts(ms, *_C15_METRICS)
    en = (
        f"Char LM after the same steps: PyTorch default init {f['val_torch_scaled']}, normal(0.02) "
        f"{f['val_normal_scaled']}, Xavier {f['val_xavier_scaled']}; the default is {f['torch_minus_best']} from the "
        "best of the three."
    )
    zh = (
        f"相同训练步数后的字符语言模型验证损失：PyTorch 默认初始化 {f['val_torch_scaled']}，normal(0.02) "
        f"{f['val_normal_scaled']}，Xavier {f['val_xavier_scaled']}；默认初始化距三者最好值 {f['torch_minus_best']}"
        "。"
    )
    return seed_verdict(ms, ("torch_minus_best",), C15_RULE, en, zh)


ONE_HOT = 0.7  # C16: mean max attention probability at step 0 at or above this: near one-hot
GRAD_SMALL = 0.1  # C16: ‖∂L/∂W_q‖ at or below this multiple of the normal init's
HURTS = 0.1  # C16: nats: a final loss this much worse
C16_RULE = Ladder(
    (
        Case(
            "refuted",
            f"the mean max attention probability at step 0 stays < {ONE_HOT}",
            f"第 0 步的平均最大注意力概率 < {ONE_HOT}",
            lambda maxp, grad_ratio, dval: maxp < ONE_HOT,
        ),
        Case(
            "supported",
            f"it is ≥ {ONE_HOT}, ‖∂L/∂W_q‖ falls to ≤ {GRAD_SMALL}× the normal init's and the final loss is "
            f"> {HURTS} nats worse",
            f"它 ≥ {ONE_HOT}，‖∂L/∂W_q‖ 降到正常初始化的 {GRAD_SMALL} 倍以下，且最终损失差 {HURTS} nat 以上",
            lambda maxp, grad_ratio, dval: grad_ratio <= GRAD_SMALL and dval > HURTS,
        ),
    ),
    otherwise="nuanced",
    otherwise_en=f"attention is near one-hot (≥ {ONE_HOT}) but the gradient or the final loss does not suffer as much",
    otherwise_zh=f"注意力接近独热（≥ {ONE_HOT}），但梯度或最终损失没有受到那么大的影响",
)


_C16_METRICS = (
    "step0_maxp_x1",
    "step0_maxp_x50",
    "step0_score_std_x50",
    "step0_gradq_ratio_x50",
    "step0_passthrough_ratio_x50",
    "val_normal_scaled",
    "val_large_scaled",
    "large_minus_normal",
)


@claim(
    "C16-large-init-one-hot",
    experiment="init-training",
    metrics=_C16_METRICS,
    rule_text=C16_RULE.text("normal(0.02) vs the same weights ×50 on the attention projections."),
)
def _c16(ms: dict[str, Metric]) -> Verdict:
    f = fmts(ms, *_C16_METRICS)
    en = (
        "Attention projections initialised 50× too large (std 1 instead of 0.02, bug zoo 'large_init_scale'): at "
        f"step 0 the scores have std {f['step0_score_std_x50']} and the largest attention weight averages "
        f"{f['step0_maxp_x50']} (normal init: {f['step0_maxp_x1']}). The softmax lets through "
        f"{f['step0_passthrough_ratio_x50']} of the gradient it passes at normal init, yet ‖∂L/∂W_q‖ is "
        f"{f['step0_gradq_ratio_x50']} the normal one (the same ×50 also inflates k, v and the output). After "
        f"training: {f['val_large_scaled']} vs {f['val_normal_scaled']} (difference {f['large_minus_normal']})."
    )
    zh = (
        "注意力投影初始化放大 50 倍（标准差 1 而非 0.02，错误库 'large_init_scale'）：第 0 步分数标准差 "
        f"{f['step0_score_std_x50']}，最大注意力权重平均 {f['step0_maxp_x50']}（正常初始化 {f['step0_maxp_x1']}）。"
        f"softmax 放行的梯度只有正常初始化时的 {f['step0_passthrough_ratio_x50']}，但 ‖∂L/∂W_q‖ 为正常初始化的 "
        f"{f['step0_gradq_ratio_x50']}（同样的 ×50 也放大了 k、v 和输出）。训练后：{f['val_large_scaled']} 对 "
        f"{f['val_normal_scaled']}（差 {f['large_minus_normal']}）。"
    )
    lead = None
    if all(v > GRAD_SMALL for v in ms["step0_gradq_ratio_x50"].values):
        lead = {"nuanced": ("Near one-hot, yes; vanishing gradients, no.", "接近 one-hot 成立；梯度消失不成立。")}
    return seed_verdict(ms, ("step0_maxp_x50", "step0_gradq_ratio_x50", "large_minus_normal"), C16_RULE, en, zh, lead)
