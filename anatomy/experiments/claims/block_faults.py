"""§5: the post's silent bugs from the zoo, trained beside the correct block (claims C48, C50, C51), and the
debugging order of a blown-up run (C55).

``block-faults``   heads split without the transpose (C48), the norm on the residual path (C50), one LayerNorm
                   shared by both sub-layers (C51).
C55 (debugging order) is judged on ``norm-depth-grid`` (norm_depth.py), which trains each suspect on its own.
"""

from __future__ import annotations

from typing import Any

import torch

from anatomy import ModelConfig, pitfalls
from anatomy.experiments.devices import on
from anatomy.experiments.figures import figure
from anatomy.experiments.fitting import POST_SIZES, budget, build, curve_stats, finite_metrics, fit
from anatomy.experiments.registry import Metric, Trial, Verdict, claim, experiment
from anatomy.experiments.rules import TOL, decide, differences, fmt_count, fmt_values, per_seed
from anatomy.experiments.tasks import MarkovTask

ROUGHER, SPIKIER = 0.1, 0.3  # C50: roughness / largest rise (nats) higher by more than these is erratic


# --- C48, C50, C51: the silent bugs, trained ---------------------------------------------------------------------


def _prefix_loss(model: torch.nn.Module, ids: torch.Tensor, start: int) -> float:
    """Generation-time loss: predict token ℓ from the prefix ids[:, :ℓ] alone (nothing after it in the input)."""
    model.eval()
    losses = []
    with torch.no_grad():
        for length in range(max(start, 4), ids.shape[1], 3):
            logits = model(input_ids=ids[:, :length]).logits[:, -1]
            losses.append(torch.nn.functional.cross_entropy(logits, ids[:, length]).item())
    return sum(losses) / len(losses)


def _future_leak(model: torch.nn.Module, ids: torch.Tensor, g: torch.Generator) -> float:
    """Change every token from position T/2 on: how much do the logits *before* T/2 move (relative)?"""
    half = ids.shape[1] // 2
    other = ids.clone()
    other[:, half:] = on(ids.device, lambda: torch.randint(0, int(ids.max()) + 1, other[:, half:].shape, generator=g))
    model.eval()
    with torch.no_grad():
        a, b = model(input_ids=ids).logits[:, :half], model(input_ids=other).logits[:, :half]
    return float(((a - b).abs().max() / a.abs().max()).item())


@experiment("block-faults")
def block_faults(trial: Trial) -> dict[str, float]:
    T, batch = budget(trial.preset, 32, 32, 32, POST_SIZES["T"]), 16
    d_model = budget(trial.preset, 32, 32, 32, POST_SIZES["d_model"])
    n_heads = budget(trial.preset, 4, 4, 4, POST_SIZES["n_heads"])
    steps = budget(trial.preset, 30, 200, 800)
    layers = budget(trial.preset, 2, 3, 6)
    lrs = budget(trial.preset, (3e-3,), (3e-3,), (3e-3, 1e-2))
    task = MarkovTask(vocab=16, lags=(1, 2), p=0.9, seed=trial.seed)
    g = torch.Generator().manual_seed(trial.seed)
    train = task.sample(steps * batch, T, g, trial.device)
    held = task.sample(64, T, g, trial.device)

    def batches(step: int) -> dict[str, torch.Tensor]:
        return task.batch(train[step * batch : (step + 1) * batch])

    out: dict[str, float] = {"floor": task.floor, "uniform": task.uniform, "n_layers": layers}
    curves: dict[str, list[float]] = {}
    for arm in ("correct", "split_without_transpose", "norm_on_residual_path", "shared_layernorm"):
        stats = []
        for lr in lrs:
            torch.manual_seed(trial.seed)
            model = build(
                ModelConfig(
                    vocab_size=task.vocab,
                    d_model=d_model,
                    n_heads=n_heads,
                    n_layers=layers,
                    max_seq_len=T,
                    init="xavier",
                    scale_embeddings=True,
                ),
                trial.device,
            )
            if arm != "correct":
                pitfalls.apply(model, arm)  # stays on: this model is only ever the faulty one
            losses = fit(model, batches, steps, lr=lr)
            stats.append(curve_stats(losses, uniform=task.uniform))
            curves.setdefault(arm, losses)
        key = {
            "correct": "correct",
            "split_without_transpose": "split",
            "norm_on_residual_path": "miswired",
            "shared_layernorm": "shared",
        }[arm]
        out[f"final_{key}"] = sum(s["final"] if s["final"] == s["final"] else task.uniform for s in stats) / len(lrs)
        out[f"rough_{key}"] = sum(s["rough"] for s in stats) / len(lrs)
        out[f"spike_{key}"] = sum(min(s["spike"], task.uniform) for s in stats) / len(lrs)
        if key in ("correct", "split"):
            with torch.no_grad():
                model.eval()
                out[f"tf_loss_{key}"] = model(**task.batch(held)).loss.item()
            out[f"prefix_loss_{key}"] = _prefix_loss(model, held, task.start)
            out[f"future_leak_{key}"] = _future_leak(model, held, g)
        if key == "shared":
            out["params_shared"] = float(sum(p.numel() for p in model.parameters()))
        if key == "correct":
            out["params_correct"] = float(sum(p.numel() for p in model.parameters()))

    # silence: does a fault raise, or change the output's shape?
    torch.manual_seed(trial.seed)
    probe = build(ModelConfig(vocab_size=task.vocab, d_model=32, n_heads=4, n_layers=2, max_seq_len=T), trial.device)
    ref = probe(input_ids=held[:2]).logits
    for fault, key in (("split_without_transpose", "split"), ("merge_wrong_transpose", "merge")):
        try:
            with pitfalls.inject(probe, fault):
                bad = probe(input_ids=held[:2]).logits
            out[f"raised_{key}"], out[f"same_shape_{key}"] = 0.0, float(bad.shape == ref.shape)
            out[f"output_change_{key}"] = ((bad - ref).abs().max() / ref.abs().max()).item()
        except Exception:  # noqa: BLE001 — any error at all means the bug is not silent
            out[f"raised_{key}"], out[f"same_shape_{key}"], out[f"output_change_{key}"] = 1.0, 0.0, float("nan")

    def draw(ax: Any) -> None:
        for arm, losses in curves.items():
            if arm == "correct":
                ax.plot(losses, color="k", ls="--", lw=1.6, zorder=3, label="correct block")
            else:
                ax.plot(losses, lw=1.1, label=arm)
        ax.axhline(task.floor, color="k", ls=":", lw=0.8, label="best possible (honest)")
        ax.set(
            xlabel="step",
            ylabel="train loss (nats)",
            ylim=(0, task.uniform * 1.4),
            title=f"Silent bugs from the zoo, {layers}-layer Pre-Norm LM (lr {lrs[0]:g})",
        )
        ax.legend(fontsize=8)

    figure(trial.figure_path("C48-silent-bugs-training"), draw, size=(7, 4))
    return finite_metrics(out)


@claim(
    "C48-wrong-transpose-silent",
    experiment="block-faults",
    metrics=(
        "raised_split",
        "raised_merge",
        "output_change_split",
        "output_change_merge",
        "tf_loss_split",
        "tf_loss_correct",
        "prefix_loss_split",
        "prefix_loss_correct",
        "future_leak_split",
        "future_leak_correct",
        "floor",
    ),
    rule_text="The zoo's split_without_transpose and merge_wrong_transpose. Refuted if either raises. Otherwise, "
    "trained with the split bug on the order-2 Markov LM: 'accuracy drops' = the prefix-only "
    f"(generation-style) loss is > {TOL} nats worse than the correct model's on every seed → supported; "
    f"nuanced if in addition the teacher-forced loss is > {TOL} nats *better* (the bug leaks the future "
    "and flatters the usual metric); refuted if the prefix loss is not worse on any seed; else "
    "inconclusive.",
)
def _c48(ms: dict[str, Metric]) -> Verdict:
    if max(ms["raised_split"].values) or max(ms["raised_merge"].values):
        return Verdict(
            "refuted",
            "The wrong transpose raised an error: it is not silent.",
            "错误的转置直接报错了：它并不是静默的。",
        )
    nums_en = (
        "Neither a split without the transpose nor a merge without it raises or changes a shape (output values "
        f"change by {ms['output_change_split'].fmt()} and {ms['output_change_merge'].fmt()}). Trained with the "
        f"split bug, the teacher-forced validation loss is {ms['tf_loss_split'].fmt()} (correct model "
        f"{ms['tf_loss_correct'].fmt()}; best honest loss {ms['floor'].fmt()}), but predicting from the prefix "
        f"alone, as in generation, it is {ms['prefix_loss_split'].fmt()} (correct "
        f"{ms['prefix_loss_correct'].fmt()}): changing future tokens moves its past logits by "
        f"{ms['future_leak_split'].fmt()} (correct {ms['future_leak_correct'].fmt()})."
    )
    nums_zh = (
        f"拆头不转置、并头不转置都不会报错，也不改变形状（输出数值分别变化 {ms['output_change_split'].fmt()} 和 "
        f"{ms['output_change_merge'].fmt()}）。带着拆头错误训练后，teacher forcing 的验证 loss 为 "
        f"{ms['tf_loss_split'].fmt()}（正确模型 {ms['tf_loss_correct'].fmt()}；诚实的最优 {ms['floor'].fmt()}）"
        f"，但像生成时那样只用前缀预测则为 {ms['prefix_loss_split'].fmt()}（正确 "
        f"{ms['prefix_loss_correct'].fmt()}）：改动未来的 token 会让它过去位置的 logits 变化 "
        f"{ms['future_leak_split'].fmt()}（正确模型 {ms['future_leak_correct'].fmt()}）。"
    )
    rows = per_seed(ms, "tf_loss_split", "tf_loss_correct", "prefix_loss_split", "prefix_loss_correct")
    hurt = [ps > pc + TOL for _, _, ps, pc in rows]
    looks_better = [ts < tc - TOL for ts, tc, _, _ in rows]
    return decide(
        nums_en,
        nums_zh,
        (
            "nuanced",
            all(hurt) and all(looks_better),
            " Silent, yes — but the training and validation numbers look *better*, because mixing heads leaks "
            "future tokens into the past; only an honest, generation-style evaluation shows the damage.",
            "确实是静默的——但训练和验证指标反而看起来“更好”，因为串味的头把未来 token 泄露给了过去；"
            "只有诚实的、按生成方式的评估才能看到损害。",
        ),
        ("supported", all(hurt), "", ""),
        ("refuted", not any(hurt), " The bug did not lower accuracy here.", "这里该错误没有降低准确率。"),
    )


@claim(
    "C50-miswired-pre-norm-erratic",
    experiment="block-faults",
    metrics=(
        "n_layers",
        "final_miswired",
        "final_correct",
        "rough_miswired",
        "rough_correct",
        "spike_miswired",
        "spike_correct",
    ),
    rule_text="The zoo's norm_on_residual_path vs the correct Pre-Norm block, same data and init. Erratic = "
    f"roughness (climb-back per unit of descent of the smoothed curve) higher by > {ROUGHER} or largest "
    f"rise higher by > {SPIKIER} nats. Supported if erratic on every seed; nuanced if not erratic on any "
    f"seed but > {TOL} nats worse at the end on every seed; refuted if neither on any seed; else "
    "inconclusive.",
)
def _c50(ms: dict[str, Metric]) -> Verdict:
    nums_en = (
        f"{fmt_count(ms['n_layers'])} layers: the Pre-Norm block wired as x = norm(x); x = x + f(x) ends at "
        f"{ms['final_miswired'].fmt()} vs {ms['final_correct'].fmt()} for the correct wiring; roughness (climb-"
        f"back per unit of descent) {ms['rough_miswired'].fmt()} vs {ms['rough_correct'].fmt()}, largest rise "
        f"{ms['spike_miswired'].fmt()} vs {ms['spike_correct'].fmt()} nats."
    )
    nums_zh = (
        f"{fmt_count(ms['n_layers'])} 层：接成 x = norm(x); x = x + f(x) 的 Pre-Norm block 最终 loss 为 "
        f"{ms['final_miswired'].fmt()}，正确接法为 {ms['final_correct'].fmt()}；粗糙度（每下降一单位回升多少）"
        f"{ms['rough_miswired'].fmt()} 对 {ms['rough_correct'].fmt()}，最大回升 {ms['spike_miswired'].fmt()} 对 "
        f"{ms['spike_correct'].fmt()} nat。"
    )
    rows = per_seed(
        ms, "rough_miswired", "rough_correct", "spike_miswired", "spike_correct", "final_miswired", "final_correct"
    )
    erratic = [rm > rc + ROUGHER or sm > sc + SPIKIER for rm, rc, sm, sc, _, _ in rows]
    worse = [fm > fc + TOL for *_, fm, fc in rows]
    return decide(
        nums_en,
        nums_zh,
        ("supported", all(erratic), "", ""),
        (
            "nuanced",
            not any(erratic) and all(worse),
            " The miswired block trains worse, but not erratically.",
            "接错的 block 训练得更差，但曲线并没有乱跳。",
        ),
        (
            "refuted",
            not any(erratic) and not any(worse),
            " It trained as well and as smoothly as the correct block.",
            "它训练得和正确的 block 一样好、一样平滑。",
        ),
    )


@claim(
    "C51-shared-layernorm-hurts",
    experiment="block-faults",
    metrics=("n_layers", "final_shared", "final_correct", "params_shared", "params_correct"),
    rule_text=f"The zoo's shared_layernorm vs separate norms, same data and init. Supported if sharing ends > {TOL} "
    f"nats worse on every seed; refuted if the difference stays within ±{TOL} (no clear drop) or sharing "
    f"is better by > {TOL} on every seed; otherwise inconclusive.",
)
def _c51(ms: dict[str, Metric]) -> Verdict:
    diffs = differences(ms, "final_shared", "final_correct")
    d = fmt_values(diffs, " nats")
    saved = differences(ms, "params_correct", "params_shared")
    nums_en = (
        f"{fmt_count(ms['n_layers'])} layers: sharing one LayerNorm between the two sub-layers of each block "
        f"saves {fmt_values(saved)} parameters and ends at {ms['final_shared'].fmt()} vs "
        f"{ms['final_correct'].fmt()} (shared − separate = {d})."
    )
    nums_zh = (
        f"{fmt_count(ms['n_layers'])} 层：每个 block 的两个子层共用一个 LayerNorm，省下 {fmt_values(saved)} 个参"
        f"数，最终 loss {ms['final_shared'].fmt()}，分开时 {ms['final_correct'].fmt()}（共用 − 分开 = {d}）。"
    )
    return decide(
        nums_en,
        nums_zh,
        ("supported", all(x > TOL for x in diffs), "", ""),
        (
            "refuted",
            all(abs(x) <= TOL for x in diffs),
            " No clear drop: the loss stayed within the tolerance.",
            "没有明显下降：loss 差异在容差之内。",
        ),
        ("refuted", all(x < -TOL for x in diffs), " Sharing was even better here.", "这里共用反而更好。"),
    )


# --- C55 (judged on the add_norm grid) ------------------------------------------------------------------------


@claim(
    "C55-explosion-debug-order",
    experiment="norm-depth-grid",
    metrics=(
        "failed_pre_mid",
        "failed_large_init",
        "nan_large_init",
        "final_large_init",
        "failed_high_lr",
        "nan_high_lr",
        "final_high_lr",
        "failed_post_any_lr",
    ),
    rule_text="Deepest grid depth, no warm-up, no clipping; the baseline is Pre-Norm at lr 3e-3. Each suspect is "
    "changed alone: attention weights ×10 (the zoo's large_init_scale), lr ×10, Post-Norm instead of "
    "Pre-Norm (failed at any learning rate of the sweep). 'Failed' = NaN or final loss within 0.1 nats of "
    "uniform guessing. Supported if all three fail on every seed; nuanced if the same 1–2 do on every "
    "seed; refuted if none does; inconclusive if the baseline failed or the seeds disagree.",
)
def _c55(ms: dict[str, Metric]) -> Verdict:
    init = [f for f in ms["failed_large_init"].values]
    lr = [f for f in ms["failed_high_lr"].values]
    order = [f for f in ms["failed_post_any_lr"].values]
    healthy = all(v == 0 for v in ms["failed_pre_mid"].values)
    nums_en = (
        f"From a healthy Pre-Norm run (failed: {ms['failed_pre_mid'].fmt()}), changing one thing: a 10× "
        f"attention init → failed {ms['failed_large_init'].fmt()} (NaN {ms['nan_large_init'].fmt()}, final "
        f"{ms['final_large_init'].fmt()}); 10× the learning rate → failed {ms['failed_high_lr'].fmt()} (NaN "
        f"{ms['nan_high_lr'].fmt()}, final {ms['final_high_lr'].fmt()}); Post- instead of Pre-Norm → failed at "
        f"some learning rate: {ms['failed_post_any_lr'].fmt()}."
    )
    nums_zh = (
        f"从一个健康的 Pre-Norm 运行出发（失败：{ms['failed_pre_mid'].fmt()}），每次只改一处：注意力初始化放大 "
        f"10 倍 → 失败 {ms['failed_large_init'].fmt()}（NaN {ms['nan_large_init'].fmt()}，最终 "
        f"{ms['final_large_init'].fmt()}）；学习率放大 10 倍 → 失败 {ms['failed_high_lr'].fmt()}（NaN "
        f"{ms['nan_high_lr'].fmt()}，最终 {ms['final_high_lr'].fmt()}）；Post-Norm 代替 Pre-Norm → "
        f"在某个学习率失败：{ms['failed_post_any_lr'].fmt()}。"
    )
    causes = [sum(x) for x in zip(init, lr, order)]
    names = [("the init", "初始化", init), ("the learning rate", "学习率", lr), ("the norm order", "Norm 顺序", order)]
    always = [(en, zh) for en, zh, vals in names if all(v > 0 for v in vals)]
    never = [(en, zh) for en, zh, vals in names if all(v == 0 for v in vals)]
    return decide(
        nums_en,
        nums_zh,
        ("inconclusive", not healthy, " The baseline itself failed.", "基线本身就失败了。"),
        (
            "supported",
            all(c == 3 for c in causes),
            " Each of the three suspects, alone, breaks training.",
            "三个嫌疑因素中的每一个单独出现都会破坏训练。",
        ),
        (
            "refuted",
            all(c == 0 for c in causes),
            " None of the three broke training on its own.",
            "三个因素单独出现都没有破坏训练。",
        ),
        (
            "nuanced",
            len(always) + len(never) == 3,
            f" Only {' and '.join(e for e, _ in always)} broke training when changed alone (not "
            f"{' and '.join(e for e, _ in never)}); a failure with no NaN is a stall, not an explosion.",
            f"只有{'、'.join(z for _, z in always)}单独就能破坏训练（{'、'.join(z for _, z in never)}不能）；"
            "没有 NaN 的失败是停滞，不是爆炸。",
        ),
    )
