"""§5.3: the FFN's width (claims C52, C54).

``ffn-width``      d_ff = 1×, 4×, 8× D on a task that needs a lookup table (C52), and overfitting on a tiny training
                   set: FFN width, dropout on the FFN vs on attention (C54).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from anatomy import ModelConfig
from anatomy.experiments.devices import on
from anatomy.experiments.figures import figure
from anatomy.experiments.fitting import budget, build, finite_metrics, fit
from anatomy.experiments.registry import Metric, Trial, Verdict, claim, experiment
from anatomy.experiments.rules import TOL, decide, fmt_count, per_seed
from anatomy.experiments.tasks import MarkovTask

DROPOUT_SITE = 0.02  # C54: nats: FFN dropout leaves a gap smaller than attention dropout by more than this


# --- C52, C54 ---------------------------------------------------------------------------------------------------


@experiment("ffn-width")
def ffn_width(trial: Trial) -> dict[str, float]:
    d, T, batch = 32, 32, 16
    steps = budget(trial.preset, 30, 200, 800)
    widths = budget(trial.preset, (1, 4, 8), (1, 4, 8), (1, 2, 4, 8))
    task = MarkovTask(vocab=16, lags=(1, 2), p=0.9, seed=trial.seed)
    g, dev = torch.Generator().manual_seed(trial.seed), trial.device
    train = task.sample(steps * batch, T, g, dev)
    val = task.batch(task.sample(128, T, g, dev))
    small_ids = task.sample(budget(trial.preset, 32, 128, 128), T, g, dev)  # a small training set, to overfit
    small = task.batch(small_ids)
    small_steps = budget(trial.preset, 30, 200, 600)
    pick = on(dev, lambda: torch.randint(0, len(small_ids), (small_steps, batch), generator=g))

    def model(d_ff: int, attn_drop: float = 0.0, ffn_drop: float = 0.0) -> nn.Module:
        torch.manual_seed(trial.seed)
        m = build(
            ModelConfig(
                vocab_size=task.vocab,
                d_model=d,
                n_heads=4,
                n_layers=2,
                d_ff=d_ff,
                max_seq_len=T,
                init="xavier",
                scale_embeddings=True,
            ),
            dev,
        )
        stack: Any = m.stack  # torch's stubs read a sub-module as Tensor | Module
        for block in stack.blocks:  # dropout on one sub-layer's output only, same rate
            block.attn_add_norm.dropout.p, block.ffn_add_norm.dropout.p = attn_drop, ffn_drop
        return m

    def evaluate(m: nn.Module, batch_: dict[str, torch.Tensor]) -> float:
        m.eval()
        with torch.no_grad():
            return float(m(**batch_).loss.item())

    out: dict[str, float] = {"floor": task.floor}
    for w in widths:
        m = model(w * d)
        fit(m, lambda step: task.batch(train[step * batch : (step + 1) * batch]), steps, lr=3e-3)
        out[f"val_ff{w}x"] = evaluate(m, val)
    gaps = {}
    for name, kw in (
        ("ff1x", dict(d_ff=d)),
        ("ff4x", dict(d_ff=4 * d)),
        ("ff4x_attn_dropout", dict(d_ff=4 * d, attn_drop=0.3)),
        ("ff4x_ffn_dropout", dict(d_ff=4 * d, ffn_drop=0.3)),
    ):
        m = model(**kw)
        fit(m, lambda step: task.batch(small_ids[pick[step]]), small_steps, lr=3e-3)
        tr, va = evaluate(m, small), evaluate(m, val)
        out[f"gap_{name}"], out[f"val_small_{name}"] = va - tr, va
        gaps[name] = (tr, va)
    out["n_train_tokens_small"] = float(small["input_ids"].numel())

    def draw(axes: list[Any]) -> None:
        ax, gx = axes
        ax.plot(list(widths), [out[f"val_ff{w}x"] for w in widths], "o-")
        ax.axhline(task.floor, color="k", ls=":", lw=0.8, label="best possible")
        ax.set(
            xscale="log",
            xlabel="d_ff / d_model",
            ylabel="validation loss",
            title=f"FFN width, {steps} steps of fresh data",
        )
        ax.minorticks_off()
        ax.set_xticks(list(widths), [f"{w}×" for w in widths])
        ax.legend(fontsize=8)
        names = list(gaps)
        xs = torch.arange(len(names), device="cpu").numpy()
        gx.bar(xs - 0.2, [gaps[k][0] for k in names], 0.4, label="train (the small set)")
        gx.bar(xs + 0.2, [gaps[k][1] for k in names], 0.4, label="validation")
        labels = {
            "ff1x": "d_ff = D",
            "ff4x": "d_ff = 4D",
            "ff4x_attn_dropout": "4D + dropout\non attention",
            "ff4x_ffn_dropout": "4D + dropout\non FFN",
        }
        gx.set_xticks(xs, [labels[k] for k in names])
        gx.set(
            ylabel="loss",
            ylim=(0, max(v for _, v in gaps.values()) * 1.3),
            title=f"Overfitting a small training set ({small['input_ids'].numel()} tokens)",
        )
        gx.legend(fontsize=8, loc="upper right", ncol=2)

    figure(trial.figure_path("C52-ffn-width-and-overfitting"), draw, grid=(1, 2), size=(11, 4))
    return finite_metrics(out)


@claim(
    "C52-dff-four-times",
    experiment="ffn-width",
    metrics=("val_ff1x", "val_ff4x", "val_ff8x", "floor"),
    rule_text="2-layer LM, D = 32, on the order-2 Markov task (the next token is a table lookup on two tokens: FFN "
    f"work), equal steps of fresh data. Supported if 4× is within {TOL} nats of the best width and > "
    f"{TOL} better than 1× on every seed; refuted if neither on any seed; nuanced if one of the two holds "
    "on every seed; otherwise inconclusive. The literature half is cited in the reason.",
)
def _c52(ms: dict[str, Metric]) -> Verdict:
    widths = [k for k in ("val_ff1x", "val_ff2x", "val_ff4x", "val_ff8x") if k in ms]
    rows = per_seed(ms, *widths)
    i4, i1 = widths.index("val_ff4x"), widths.index("val_ff1x")
    near_best = [r[i4] <= min(r) + TOL for r in rows]
    pays = [r[i1] > r[i4] + TOL for r in rows]
    nums = ", ".join(f"{k[6:]} {ms[k].fmt()}" for k in widths)
    lit_en = (
        " In the literature: 4× in the 2017 paper, BERT, GPT-2/3 and T5; gated FFNs keep about the same "
        "parameters with 8/3× (LLaMA 1) or go to 3.5× (Mistral 7B, LLaMA 2 70B)."
    )
    lit_zh = (
        "文献中：2017 年论文、BERT、GPT-2/3、T5 用 4 倍；门控 FFN 用 8/3 倍保持参数量相当（LLaMA 1），或用 3.5 倍"
        "（Mistral 7B、LLaMA 2 70B）。"
    )
    en = f"Validation loss by d_ff/d_model: {nums}."
    zh = f"按 d_ff/d_model 的验证 loss：{nums}。"
    if all(near_best) and all(pays):
        return Verdict(
            "supported",
            en + f" 4× is within {TOL} nats of the best width and clearly better than 1×." + lit_en,
            zh + f"4 倍与最佳宽度相差不到 {TOL} nat，且明显优于 1 倍。" + lit_zh,
        )
    if not any(near_best) and not any(pays):
        return Verdict(
            "refuted",
            en + " 4× is neither near the best nor better than 1×." + lit_en,
            zh + "4 倍既不接近最佳，也不优于 1 倍。" + lit_zh,
        )
    if all(near_best) or all(pays):
        part = (
            "4× is near the best, but 1× is about as good: width barely matters here"
            if all(near_best)
            else "4× beats 1×, but a wider FFN is clearly better still"
        )
        part_zh = (
            "4 倍接近最佳，但 1 倍也差不多：这里宽度影响不大"
            if all(near_best)
            else "4 倍优于 1 倍，但更宽的 FFN 明显更好"
        )
        return Verdict("nuanced", en + f" {part}." + lit_en, zh + f"{part_zh}。" + lit_zh)
    return Verdict("inconclusive", en + " The seeds disagree." + lit_en, zh + "各种子结论不一致。" + lit_zh)


@claim(
    "C54-ffn-overfits",
    experiment="ffn-width",
    metrics=("gap_ff1x", "gap_ff4x", "gap_ff4x_attn_dropout", "gap_ff4x_ffn_dropout", "n_train_tokens_small"),
    rule_text="A 2-layer LM trained for many epochs on a small set (128 sequences) of the order-2 Markov task. Two "
    f"signs: the train–validation gap grows by > {TOL} nats from d_ff = D to 4D, and dropout 0.3 on the "
    f"FFN output leaves a gap > {DROPOUT_SITE} nats smaller than the same dropout on the attention "
    "output. Supported if both on every seed, nuanced if one on every seed, refuted if neither on any "
    "seed; else inconclusive.",
)
def _c54(ms: dict[str, Metric]) -> Verdict:
    g1, g4 = ms["gap_ff1x"], ms["gap_ff4x"]
    ga, gf = ms["gap_ff4x_attn_dropout"], ms["gap_ff4x_ffn_dropout"]
    rows = per_seed(ms, "gap_ff1x", "gap_ff4x", "gap_ff4x_attn_dropout", "gap_ff4x_ffn_dropout")
    grows = [b > a + TOL for a, b, _, _ in rows]
    ffn_site = [f < a - DROPOUT_SITE for _, _, a, f in rows]
    nums_en = (
        f"Train-validation gap on a small training set ({fmt_count(ms['n_train_tokens_small'])} tokens): d_ff = "
        f"D {g1.fmt()}, d_ff = 4D {g4.fmt()}; at 4D with dropout 0.3 on the attention output {ga.fmt()}, on the "
        f"FFN output {gf.fmt()}."
    )
    nums_zh = (
        f"小训练集（{fmt_count(ms['n_train_tokens_small'])} 个 token）上的训练-验证差距：d_ff = D 时 "
        f"{g1.fmt()}，d_ff = 4D 时 {g4.fmt()}；4D 且在注意力输出上加 0.3 dropout 时 {ga.fmt()}，在 FFN "
        f"输出上加时 {gf.fmt()}。"
    )
    part = "a wider FFN overfits more" if all(grows) else "dropout on the FFN closes more of the gap"
    part_zh = "FFN 越宽过拟合越严重" if all(grows) else "在 FFN 上加 dropout 更能缩小差距"
    return decide(
        nums_en,
        nums_zh,
        (
            "supported",
            all(grows) and all(ffn_site),
            " A wider FFN overfits more, and dropout there closes more of the gap than the same dropout on attention.",
            "FFN 越宽过拟合越严重，而且在 FFN 上加 dropout 比在注意力上加同样的 dropout 更能缩小差距。",
        ),
        (
            "nuanced",
            all(grows) or all(ffn_site),
            f" Only half of it holds on every seed: {part}.",
            f"只有一半在每个种子上成立：{part_zh}。",
        ),
        (
            "refuted",
            not any(grows) and not any(ffn_site),
            " Neither a wider FFN nor dropout placement points at the FFN.",
            "FFN 宽度和 dropout 的位置都没有指向 FFN 是过拟合的主要来源。",
        ),
    )
