"""§1: the sqrt(d_k) scale and softmax saturation (claims C7, C8).

``softmax-saturation``  C7: Monte-Carlo softmax with unit-variance q, k, and a real model at initialisation
                        across d_k and init scale (the saturation figure).
C8 is judged on the ``init-training`` experiment of init_training.py (the same LM trained with and without
the scale, beside the init-scale arms of C15/C16).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from anatomy import pitfalls
from anatomy.experiments.devices import cpu_draws, on
from anatomy.experiments.figures import figure
from anatomy.experiments.fitting import budget, tiny_model
from anatomy.experiments.probes import probe_attention
from anatomy.experiments.registry import Metric, Trial, Verdict, claim, experiment
from anatomy.experiments.rules import Case, Ladder, fmts, seed_verdict
from anatomy.experiments.tasks import LM_T, char_corpus, lm_batch

SATURATED = 0.7  # C7: a mean largest softmax weight at or above this is saturated (near one-hot)
GRAD_GONE = 0.2  # C7: a softmax Jacobian norm at or below this share of the scaled one is "≈ 0"
STALL = 0.05  # C8: nats: an improvement below this after the first quarter of training is a stall


# =============================================================================================================
# softmax-saturation (C7): how peaked softmax gets, and how much gradient passes it, with and without 1/sqrt(d_k)
# =============================================================================================================

SAT_DK = (16, 32, 64, 128)  # real model: d_model = 128, h = 8, 4, 2, 1
SAT_FACTORS = (1, 2, 5, 10, 20, 50)  # init scale on the attention projections (the bug zoo's large_init_scale)
MC_DK, MC_KEYS = (16, 64, 256), 32
TORCH_INIT_FACTOR = (3 * 128) ** -0.5 / 0.02  # nn.Linear's default std at fan-in 128 relative to std 0.02


def _softmax_stats(scores: torch.Tensor) -> torch.Tensor:
    """Per row: (max probability, Frobenius norm of the softmax Jacobian diag(p) - p p^T, max p > 0.99), summed over
    rows. ``‖J‖² = Σp² - 2Σp³ + (Σp²)²`` (no N×n×n tensor needed)."""
    p = scores.softmax(-1)
    s2, s3 = p.pow(2).sum(-1), p.pow(3).sum(-1)
    jac = (s2 - 2 * s3 + s2.pow(2)).clamp_min(0).sqrt()
    top = p.max(-1).values
    return torch.stack([top.sum(), jac.sum(), (top > 0.99).double().sum()])


def _monte_carlo(
    dk: int, n: int, g: torch.Generator, chunk: int = 1000, device: str = "cpu"
) -> dict[str, tuple[float, float, float]]:
    """Means of ``_softmax_stats`` over ``n`` query rows, each against 32 keys, q and k with iid N(0, 1) entries
    (drawn in chunks so that memory stays small at d_k = 256)."""
    totals = {tag: torch.zeros(3, dtype=torch.float64, device=device) for tag in ("unscaled", "scaled")}
    done = 0
    while done < n:
        m = min(chunk, n - done)
        q = on(device, torch.randn, m, 1, dk, generator=g, dtype=torch.float64)  # drawn on the CPU
        k = on(device, torch.randn, m, MC_KEYS, dk, generator=g, dtype=torch.float64)
        s = (q * k).sum(-1)  # (m, keys)
        totals["unscaled"] += _softmax_stats(s)
        totals["scaled"] += _softmax_stats(s / math.sqrt(dk))
        done += m
    return {tag: tuple((t / n).tolist()) for tag, t in totals.items()}


def _model_at_init(dk: int, vocab: int, seed: int, torch_init: bool, device: str = "cpu") -> nn.Module:
    torch.manual_seed(seed)
    with cpu_draws():  # every init on the CPU's generator, then moved
        model = tiny_model(
            d_model=128, n_heads=128 // dk, n_layers=1, vocab_size=vocab, max_seq_len=LM_T, tie_embeddings=False
        )
        if torch_init:
            stack: Any = model.stack
            for m in stack.blocks[0].attn.modules():
                if isinstance(m, torch.nn.Linear):
                    m.reset_parameters()
    return model.to(device)


@experiment(
    "softmax-saturation", units={"real_gradq_ratio_dk64_torchinit": "×", "real_passthrough_ratio_dk64_torchinit": "×"}
)
def softmax_saturation(trial: Trial) -> dict[str, float]:
    """Monte-Carlo softmax on unit-variance q, k; then a real 1-layer LM at initialisation across d_k and init scale."""
    g = torch.Generator().manual_seed(trial.seed)
    n = budget(trial.preset, 1_000, 5_000, 20_000)
    out, mc = {}, {}
    for dk in MC_DK:
        mc[dk] = _monte_carlo(dk, n, g, device=trial.device)
    out["mc_maxp_unscaled_dk64"], out["mc_maxp_scaled_dk64"] = mc[64]["unscaled"][0], mc[64]["scaled"][0]
    out["mc_jac_ratio_dk64"] = mc[64]["unscaled"][1] / mc[64]["scaled"][1]
    out["mc_jac_ratio_dk256"] = mc[256]["unscaled"][1] / mc[256]["scaled"][1]
    out["mc_onehot_rows_unscaled_dk64"] = mc[64]["unscaled"][2]

    train, val, vocab = char_corpus("shakespeare")
    batch = lm_batch(
        val, LM_T, budget(trial.preset, 4, 8, 16), torch.Generator().manual_seed(1000 + trial.seed), trial.device
    )
    real: dict[tuple[int, int | str, bool], dict[str, float]] = {}  # (d_k, init factor or "torch", scaled)
    for dk in SAT_DK:
        model = _model_at_init(dk, len(vocab), trial.seed, torch_init=False, device=trial.device)
        for f in SAT_FACTORS:
            for scaled in (True, False):
                undo = [pitfalls.apply(model, "large_init_scale", factor=float(f))]
                if not scaled:
                    undo.append(pitfalls.apply(model, "no_scaling"))
                real[(dk, f, scaled)] = probe_attention(model, batch)
                for u in reversed(undo):
                    u()
        model = _model_at_init(dk, len(vocab), trial.seed, torch_init=True, device=trial.device)
        for scaled in (True, False):
            undo = [] if scaled else [pitfalls.apply(model, "no_scaling")]
            real[(dk, "torch", scaled)] = probe_attention(model, batch)
            for u in undo:
                u()
    tu, ts = real[(64, "torch", False)], real[(64, "torch", True)]
    out["real_maxp_unscaled_dk64_torchinit"], out["real_maxp_scaled_dk64_torchinit"] = tu["maxp"], ts["maxp"]
    out["real_gradq_ratio_dk64_torchinit"] = tu["gradq"] / ts["gradq"]
    out["real_passthrough_ratio_dk64_torchinit"] = tu["passthrough"] / ts["passthrough"]
    out["real_score_std_unscaled_dk64_torchinit"] = tu["score_std"]
    out["real_maxp_unscaled_dk64_x50"] = real[(64, 50, False)]["maxp"]
    out["real_maxp_scaled_dk64_x50"] = real[(64, 50, True)]["maxp"]
    out["uniform_maxp_reference"] = float(torch.tensor([1 / (t + 1) for t in range(7, LM_T)], device="cpu").mean())
    _draw_saturation(trial, mc, real, out["uniform_maxp_reference"])
    return out


def _draw_saturation(
    trial: Trial,
    mc: dict[int, dict[str, tuple[float, float, float]]],
    real: dict[tuple[int, int | str, bool], dict[str, float]],
    uniform: float,
) -> None:
    path = trial.figure_path("C5-C8-C16-score-saturation")

    def by_factor(
        ax: Any, key: str
    ) -> None:  # the real LM's ``key`` against the init factor: one colour per d_k, scaled vs not
        for i, dk in enumerate(SAT_DK):
            for scaled, style, tag in ((True, "o-", "scaled"), (False, "x--", "unscaled")):
                ax.plot(
                    SAT_FACTORS,
                    [real[(dk, f, scaled)][key] for f in SAT_FACTORS],
                    style,
                    color=f"C{i}",
                    label=f"d_k={dk} {tag}",
                )

    def draw(axes: list[Any]) -> None:
        ax = axes[0]
        for tag, c in (("scaled", "C0"), ("unscaled", "C3")):
            ax.plot(MC_DK, [mc[d][tag][0] for d in MC_DK], "o-", color=c, label=f"max p, {tag}")
            ax.plot(MC_DK, [mc[d][tag][1] for d in MC_DK], "s--", color=c, label=f"‖softmax Jacobian‖, {tag}")
        ax.set(
            xscale="log",
            xticks=MC_DK,
            xticklabels=[str(d) for d in MC_DK],
            xlabel="d_k",
            ylim=(0, 1.02),
            title=f"Unit-variance q, k (the post's premise), {MC_KEYS} keys\nsolid: largest weight; dashed: "
            "gradient pass-through",
        )
        ax.minorticks_off()
        ax.legend(fontsize=7)
        ax = axes[1]
        by_factor(ax, "maxp")
        ax.axhline(uniform, color="gray", ls=":", lw=1)
        ax.text(SAT_FACTORS[-2], uniform + 0.015, "uniform", fontsize=7, color="gray")
        ax.axvline(TORCH_INIT_FACTOR, color="k", ls=":", lw=1)
        ax.text(TORCH_INIT_FACTOR * 1.05, 0.9, "PyTorch default\nnn.Linear init", fontsize=7)
        ax.set(
            xscale="log",
            xlabel="init scale × (std 0.02 → 0.02·factor)",
            ylabel="mean max attention prob",
            ylim=(0, 1.02),
            title="Real 1-layer LM at step 0 (q, k, v, o weights × factor):\nhow one-hot is the attention?",
        )
        ax.legend(fontsize=6, ncol=2, loc="lower right")
        ax = axes[2]
        by_factor(ax, "passthrough")
        ax.set(
            xscale="log",
            yscale="log",
            xlabel="init scale ×",
            ylabel="‖∂loss/∂scores‖ / ‖∂loss/∂weights‖",
            title="Gradient the softmax lets through at step 0\n(falls as the attention turns one-hot)",
        )
        ax.legend(fontsize=6, ncol=2)

    figure(path, draw, grid=(1, 3), size=(16, 4.8))


C7_RULE = Ladder(
    (
        Case(
            "refuted",
            f"unit-variance q, k at d_k=64 give a mean max-probability < {SATURATED} without the scale (no saturation)",
            f"d_k=64、q、k 方差为 1 时不缩放的平均最大概率 < {SATURATED}（没有饱和）",
            lambda mc_max, jac, real_max: mc_max < SATURATED,
        ),
        Case(
            "supported",
            f"it is ≥ {SATURATED}, the softmax Jacobian norm drops to ≤ {GRAD_GONE} of the scaled one "
            f"(gradient ≈ 0) and a real LM at PyTorch's default init also saturates (≥ {SATURATED})",
            f"平均最大概率 ≥ {SATURATED}，softmax 雅可比范数降到缩放时的 {GRAD_GONE} 以下（梯度≈0），且真实模型在默认"
            f"初始化下也饱和（≥ {SATURATED}）",
            lambda mc_max, jac, real_max: jac <= GRAD_GONE and real_max >= SATURATED,
        ),
    ),
    otherwise="nuanced",
    otherwise_en=f"the softmax saturates (≥ {SATURATED}), but its Jacobian keeps more than "
    f"{GRAD_GONE} of the scaled norm or the real LM does not saturate",
    otherwise_zh=f"softmax 饱和（≥ {SATURATED}），但雅可比范数保持在缩放时的 {GRAD_GONE} 以上，或真实模型没有饱和",
)


_C7_METRICS = (
    "mc_maxp_unscaled_dk64",
    "mc_maxp_scaled_dk64",
    "mc_onehot_rows_unscaled_dk64",
    "mc_jac_ratio_dk64",
    "mc_jac_ratio_dk256",
    "real_maxp_unscaled_dk64_torchinit",
    "real_maxp_scaled_dk64_torchinit",
    "real_gradq_ratio_dk64_torchinit",
    "real_passthrough_ratio_dk64_torchinit",
    "real_score_std_unscaled_dk64_torchinit",
)


@claim(
    "C7-unscaled-softmax-saturates",
    experiment="softmax-saturation",
    metrics=_C7_METRICS,
    rule_text=C7_RULE.text(),
)
def _c7(ms: dict[str, Metric]) -> Verdict:
    f = fmts(ms, *_C7_METRICS)
    en = (
        "With unit-variance q, k at d_k=64 (32 keys), the unscaled softmax's largest weight averages "
        f"{f['mc_maxp_unscaled_dk64']} (scaled: {f['mc_maxp_scaled_dk64']}) and {f['mc_onehot_rows_unscaled_dk64']} "
        f"of the rows exceed 0.99; but the softmax Jacobian keeps {f['mc_jac_ratio_dk64']} of its scaled norm "
        f"({f['mc_jac_ratio_dk256']} at d_k=256): the gradient shrinks, it does not vanish on average. In a real LM "
        f"at PyTorch's default init the unscaled scores have std {f['real_score_std_unscaled_dk64_torchinit']}, the "
        f"largest weight is {f['real_maxp_unscaled_dk64_torchinit']} (scaled "
        f"{f['real_maxp_scaled_dk64_torchinit']}), the softmax passes {f['real_passthrough_ratio_dk64_torchinit']} "
        f"of the scaled model's gradient and ‖∂L/∂W_q‖ is {f['real_gradq_ratio_dk64_torchinit']} the scaled one."
    )
    zh = (
        f"q、k 各分量方差为 1、d_k=64（32 个键）时，不缩放的 softmax 最大权重平均 {f['mc_maxp_unscaled_dk64']}"
        f"（缩放后 {f['mc_maxp_scaled_dk64']}），{f['mc_onehot_rows_unscaled_dk64']} 的行超过 0.99；但 softmax 的"
        f"雅可比范数仍是缩放时的 {f['mc_jac_ratio_dk64']}（d_k=256 时 {f['mc_jac_ratio_dk256']}）：梯度变小，"
        "但平均而言没有消失。真实语言模型在 PyTorch 默认初始化下，不缩放的分数标准差为 "
        f"{f['real_score_std_unscaled_dk64_torchinit']}，最大权重 {f['real_maxp_unscaled_dk64_torchinit']}（缩放 "
        f"{f['real_maxp_scaled_dk64_torchinit']}），softmax 放行的梯度是缩放模型的 "
        f"{f['real_passthrough_ratio_dk64_torchinit']}，‖∂L/∂W_q‖ 为缩放时的 {f['real_gradq_ratio_dk64_torchinit']}"
        "。"
    )
    lead = None
    if all(v > GRAD_GONE for v in ms["mc_jac_ratio_dk64"].values):
        lead = {"nuanced": ("Saturation, yes; gradients near zero, no.", "饱和成立；梯度接近零不成立。")}
    elif all(v < SATURATED for v in ms["real_maxp_unscaled_dk64_torchinit"].values):
        lead = {
            "nuanced": (
                "Saturation with unit-variance q, k, but not in a real model at its default init.",
                "q、k 方差为 1 时会饱和，但真实模型在默认初始化下不会。",
            )
        }
    return seed_verdict(
        ms, ("mc_maxp_unscaled_dk64", "mc_jac_ratio_dk64", "real_maxp_unscaled_dk64_torchinit"), C7_RULE, en, zh, lead
    )


C8_RULE = Ladder(
    (
        Case(
            "supported",
            f"the unscaled run improves by < {STALL} nats after the first quarter of training while the "
            "scaled one does not stall",
            f"不缩放的模型在训练四分之一之后下降 < {STALL} nat，而缩放的模型没有卡住",
            lambda progress_u, progress_s, gap: progress_u < STALL <= progress_s,
        ),
        Case(
            "nuanced",
            f"it keeps improving but ends > {STALL} nats worse (slower, not stuck)",
            f"它仍在下降但最终差 {STALL} nat 以上（更慢，而非卡住）",
            lambda progress_u, progress_s, gap: gap > STALL,
        ),
    ),
    otherwise="refuted",
    otherwise_en=f"the unscaled run neither stalls nor ends > {STALL} nats worse",
    otherwise_zh=f"不缩放的模型既没有卡住，最终也没有差 {STALL} nat 以上",
)


_C8_METRICS = (
    "val_torch_scaled",
    "val_torch_unscaled",
    "unscaled_minus_scaled",
    "progress_after_q1_unscaled",
    "progress_after_q1_scaled",
)


@claim(
    "C8-unscaled-training-stalls",
    experiment="init-training",
    metrics=_C8_METRICS,
    rule_text=C8_RULE.text(
        "Char LM, d_k = 64, PyTorch default init, with and without the scale (bug zoo "
        "'no_scaling'), same seed and batches."
    ),
)
def _c8(ms: dict[str, Metric]) -> Verdict:
    f = fmts(ms, *_C8_METRICS)
    en = (
        f"Same LM (d_k=64, PyTorch default init), same batches: validation loss {f['val_torch_scaled']} with the "
        f"scale and {f['val_torch_unscaled']} without (difference {f['unscaled_minus_scaled']}). After the first "
        f"quarter of training the unscaled run still improves by {f['progress_after_q1_unscaled']} (scaled: "
        f"{f['progress_after_q1_scaled']}); a stall would be < {STALL} nats."
    )
    zh = (
        f"同一语言模型（d_k=64，PyTorch 默认初始化），相同批次：有缩放时验证损失 {f['val_torch_scaled']}，去掉缩放 "
        f"{f['val_torch_unscaled']}（差 {f['unscaled_minus_scaled']}）。训练四分之一之后，不缩放的模型仍下降了 "
        f"{f['progress_after_q1_unscaled']}（缩放：{f['progress_after_q1_scaled']}）；“卡住”指下降 < {STALL} nats。"
    )
    return seed_verdict(
        ms, ("progress_after_q1_unscaled", "progress_after_q1_scaled", "unscaled_minus_scaled"), C8_RULE, en, zh
    )
