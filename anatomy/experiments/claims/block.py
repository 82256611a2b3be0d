"""§5: the whole block (claims C46–C55).

``block-anatomy``  the post's §5.1 shape table against a traced forward pass (C46) and where a block's parameters
                   sit (C53).
``tiny-heads``     an ordered-pair task that needs two relations at once, one layer, D = 32 split into 1, 2 or 8
                   heads (d_k = 32, 16, 4) (C47).
``block-faults``   the post's silent bugs from the zoo, trained beside the correct block: heads split without the
                   transpose (C48), the norm on the residual path (C50), one LayerNorm shared by both sub-layers
                   (C51).
``padding-pe``     exact float64 checks: does the positional encoding added to padding reach the real tokens (C49)?
``ffn-width``      d_ff = 1×, 4×, 8× D on a task that needs a lookup table (C52), and overfitting on a tiny training
                   set: FFN width, dropout on the FFN vs on attention (C54).
C55 (debugging order) is judged on ``norm-depth-grid`` (add_norm.py), which trains each suspect on its own.
"""

from __future__ import annotations

import torch

from anatomy import ModelConfig, build_model, pitfalls
from anatomy.components.block import EncoderBlock
from anatomy.experiments.figures import figure
from anatomy.experiments.fitting import budget, curve_stats, finite_metrics, fit
from anatomy.experiments.registry import Verdict, claim, experiment
from anatomy.experiments.rules import TOL, fmt_count, fmt_values, num, per_seed, seeds_disagree
from anatomy.experiments.tasks import MarkovTask
from anatomy.inspection import capture, trace_model

FFN_SHARE = 0.5  # C53: the FFN holds more than this share of the block's parameters
WORKS, BEATS = 0.9, 0.1  # C47: accuracy the small heads must reach; margin (accuracy) that counts as beating / worse
ROUGHER, SPIKIER = 0.1, 0.3  # C50: roughness / largest rise (nats) higher by more than these is erratic
UNCHANGED, CHANGED = 1e-9, 1e-6  # C49: relative change of real-token outputs that is none / a real change
DROPOUT_SITE = 0.02  # C54: nats: FFN dropout leaves a gap smaller than attention dropout by more than this


def _n(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


# --- C46, C53 ---------------------------------------------------------------------------------------------------

# The post's §5.1 table (B=2, S=10, d_model=16, h=4, d_k=4), by kind of step. ``softmax`` and the FFN hidden layer
# are not rows of the post's table; softmax is checked too (its shape follows from the table's scores).
POST_TABLE = {"embed": (2, 10, 16), "proj": (2, 10, 16), "split": (2, 4, 10, 4), "scores": (2, 4, 10, 10),
              "softmax": (2, 4, 10, 10), "z": (2, 4, 10, 4), "merge": (2, 10, 16), "out": (2, 10, 16),
              "add": (2, 10, 16), "norm": (2, 10, 16), "ffn": (2, 10, 16)}


@experiment("block-anatomy")
def block_anatomy(ctx):
    torch.manual_seed(ctx.seed)
    model = build_model(ModelConfig(architecture="encoder", vocab_size=32, d_model=16, n_heads=4, n_layers=1,
                                    d_ff=64, norm_position="post", activation="relu", max_seq_len=16))
    ids = torch.randint(0, 32, (2, 10), generator=torch.Generator().manual_seed(ctx.seed))
    rows = trace_model(model, {"input_ids": ids})
    checked = [r for r in rows if r.kind in POST_TABLE]
    out = {"rows_checked": len(checked),
           "shape_mismatches": sum(tuple(r.shape) != POST_TABLE[r.kind] for r in checked),
           "steps_missing": sum(kind not in {r.kind for r in rows} for kind in POST_TABLE),
           "ffn_hidden_width": next((r.shape[-1] for r in rows if r.kind == "hidden"), float("nan"))}
    out["output_equals_input_shape"] = float(tuple(rows[-1].shape) == tuple(rows[0].shape))

    # C53: where a block's parameters are
    for d, d_ff, act, tag in ((512, 2048, "relu", "d512"), (16, 64, "relu", "d16"), (512, 512, "relu", "d512_ff1x"),
                              (512, None, "swiglu", "d512_swiglu")):
        block = EncoderBlock.build(d_model=d, n_heads=8 if d == 512 else 4, d_ff=d_ff, activation=act)
        total = _n(block)
        out[f"ffn_share_{tag}"] = _n(block.ffn) / total
        out[f"attn_share_{tag}"] = _n(block.attn) / total
    out["norm_share_d512"] = (_n(EncoderBlock.build(d_model=512, n_heads=8).attn_add_norm) * 2
                              / _n(EncoderBlock.build(d_model=512, n_heads=8)))

    def draw(ax):
        labels = ["D=512, d_ff=4D", "D=512, SwiGLU", "D=512, d_ff=D"]
        tags = ["d512", "d512_swiglu", "d512_ff1x"]
        ffn = [out[f"ffn_share_{t}"] for t in tags]
        attn = [out[f"attn_share_{t}"] for t in tags]
        rest = [1 - a - f for a, f in zip(attn, ffn)]
        ax.barh(labels, attn, label="attention (Q, K, V, O)")
        ax.barh(labels, ffn, left=attn, label="FFN")
        ax.barh(labels, rest, left=[a + f for a, f in zip(attn, ffn)], label="LayerNorms")
        ax.set(xlabel="share of the block's parameters", title="Where a block's parameters are")
        ax.legend(fontsize=8, loc="lower right")
    figure(ctx.figure_path("C53-block-parameters"), draw, size=(7, 3))
    return finite_metrics(out)


def _c46(ms):
    mis, miss, n = ms["shape_mismatches"], ms["steps_missing"], ms["rows_checked"]
    if max(mis.values) == 0 and max(miss.values) == 0 and min(ms["output_equals_input_shape"].values) == 1:
        return Verdict("supported", f"All {fmt_count(n)} traced steps of a real forward pass (B=2, S=10, D=16, h=4) "
                                    "have "
                       f"the shapes of the post's table, and the block's output has its input's shape; the table "
                       f"leaves out the FFN's hidden layer, (2, 10, {fmt_count(ms['ffn_hidden_width'])}).",
                       f"真实前向传播（B=2, S=10, D=16, h=4）中追踪到的全部 {fmt_count(n)} 个步骤都与原文表格的形状一"
                       "致，"
                       f"block 输出形状等于输入；表格省略了 FFN 的隐藏层 (2, 10, {fmt_count(ms['ffn_hidden_width'])})"
                       "。")
    return Verdict("refuted", f"{mis.fmt()} traced steps differ from the post's table ({miss.fmt()} missing).",
                   f"{mis.fmt()} 个追踪步骤与原文表格不一致（缺失 {miss.fmt()} 个）。")


claim("C46-block-shape-table", section="§5.1",
      zh="设定batch_size=2、seq_len=10、d_model=16、头数h=4，所以每个头维度d_k=4…整个Block的输入输出形状完全一致",
      en="The post's shape table for B=2, S=10, d_model=16, h=4 (d_k=4); a block's output has its input's shape.",
      experiment="block-anatomy",
      metrics=("rows_checked", "shape_mismatches", "steps_missing", "output_equals_input_shape", "ffn_hidden_width"),
      rule=_c46,
      rule_text="trace_model on a one-block Post-Norm encoder; every traced step of a kind in the post's table "
                "(embedding, Q/K/V, split, scores, softmax, weighted V, merge, output projection, add, norm, FFN) "
                "must have the table's shape. Supported if none differs, none is missing and output shape = input "
                "shape; refuted otherwise.")


def _c53(ms):
    f, a = ms["ffn_share_d512"], ms["attn_share_d512"]
    en = (f"At d_ff = 4D the FFN holds {f.fmt()} of a block's parameters, attention {a.fmt()} (the same at D=16: "
          f"{ms['ffn_share_d16'].fmt()}; SwiGLU at 8/3·D: {ms['ffn_share_d512_swiglu'].fmt()}); with d_ff = D it "
          f"would be only {ms['ffn_share_d512_ff1x'].fmt()}.")
    zh = (f"d_ff = 4D 时 FFN 占一个 block 参数的 {f.fmt()}，注意力占 {a.fmt()}（D=16 时同样为 "
          f"{ms['ffn_share_d16'].fmt()}；"
          f"8/3·D 的 SwiGLU 为 {ms['ffn_share_d512_swiglu'].fmt()}）；若 d_ff = D 则只有 "
          f"{ms['ffn_share_d512_ff1x'].fmt()}。")
    if all(x > FFN_SHARE and x > y for x, y in per_seed(ms, "ffn_share_d512", "attn_share_d512")):
        return Verdict("supported", en, zh)
    return Verdict("refuted", en, zh)


claim("C53-ffn-most-parameters", section="§5.3",
      zh="大的前馈层提供了非线性变换的空间是整个Block里参数量最大的部分",
      en="The large feed-forward layer holds most of a block's parameters.",
      experiment="block-anatomy",
      metrics=("ffn_share_d512", "attn_share_d512", "ffn_share_d16", "ffn_share_d512_swiglu", "ffn_share_d512_ff1x",
               "norm_share_d512"),
      rule=_c53, rule_text=f"Counted: supported if the FFN holds more than {FFN_SHARE:.0%} of the block's parameters "
                           "and more than attention at d_ff = 4D; refuted otherwise.")


# --- C47 ------------------------------------------------------------------------------------------------------

def _pair_task(n: int, length: int, k: int, g: torch.Generator) -> dict:
    """Tokens in [0, k); at position t the model must name the ordered pair (x[t-1], x[t-2]) (k*k classes)."""
    x = torch.randint(0, k, (n, length), generator=g)
    labels = torch.full((n, length), -100)
    labels[:, 3:] = k * x[:, 1:-2] + x[:, :-3]  # logits at t predict labels[t + 1] = k*x[t-1] + x[t-2]
    return {"input_ids": x, "labels": labels}


@experiment("tiny-heads")
def tiny_heads(ctx):
    k, T, batch = 8, 24, 32
    steps = budget(ctx.preset, 40, 300, 1200)
    heads = budget(ctx.preset, (1, 2, 8), (1, 2, 8), (1, 2, 4, 8, 16))
    g = torch.Generator().manual_seed(ctx.seed)
    train = [_pair_task(batch, T, k, g) for _ in range(steps)]
    val = _pair_task(256, T, k, g)
    out, curves, maps = {"chance": 1 / k**2}, {}, None
    for h in heads:
        torch.manual_seed(ctx.seed)
        model = build_model(ModelConfig(vocab_size=k * k, d_model=32, n_heads=h, n_layers=1, max_seq_len=T,
                                        init="xavier", scale_embeddings=True))
        curves[h] = fit(model, lambda step: train[step], steps, lr=3e-3)
        with torch.no_grad(), capture(model, "stack.blocks.0.attn.hook_weights") as cache:
            logits = model(input_ids=val["input_ids"]).logits[:, :-1]
        labels = val["labels"][:, 1:]
        valid = labels != -100
        out[f"acc_h{h}"] = (logits.argmax(-1) == labels)[valid].float().mean().item()
        if h == 8:
            w = next(iter(cache.values())).mean(0)  # (H, T, T) averaged over the batch
            t = torch.arange(4, T)
            prof = torch.stack([w[:, t, t - o].mean(-1) for o in range(4)], dim=-1)  # (H, 4) mass on offsets 0..3
            top = prof.argmax(-1)
            out["heads_on_offset1_h8"] = float((top == 1).sum())
            out["heads_on_offset2_h8"] = float((top == 2).sum())
            p = prof / prof.sum(-1, keepdim=True)
            tv = 0.5 * (p[:, None] - p[None]).abs().sum(-1)  # (H, H) total-variation distance between heads
            out["head_diversity_h8"] = (tv.sum() / (h * (h - 1))).item()
            maps = w
    if maps is not None:
        def draw(axes):
            for i, ax in enumerate(axes):
                ax.imshow(maps[i, :12, :12].numpy(), cmap="Blues", vmin=0, vmax=1)
                ax.set(title=f"head {i}", xticks=[], yticks=[])
            axes[0].set(ylabel="query position", xlabel="key position")
            axes[0].figure.suptitle(f"8 heads of d_k = 4 after training on the ordered-pair task (accuracy "
                                    f"{out['acc_h8']:.2f}); target at row t = (token t-1, token t-2)", fontsize=10)
        figure(ctx.figure_path("C47-eight-heads-of-size-4"), draw, grid=(1, 8), size=(14, 2.6))
    return finite_metrics(out)


def _c47(ms):
    div = ms["head_diversity_h8"]
    same = all(v < 0.2 for v in div.values)
    nums_en = (f"Ordered-pair task (64 classes, chance {ms['chance'].fmt()}), one layer, D = 32: accuracy "
               f"{ms['acc_h1'].fmt()} with 1 head of d_k = 32, {ms['acc_h2'].fmt()} with 2 heads of 16, "
               f"{ms['acc_h8'].fmt()} with 8 heads of 4. Of the 8 small heads, {ms['heads_on_offset1_h8'].fmt()} "
               f"attend most to the previous token and {ms['heads_on_offset2_h8'].fmt()} to the one before; the "
               f"heads' patterns differ by {div.fmt()} (total variation; 0 = identical)"
               + (" — they all learnt nearly the same pattern." if same else "."))
    nums_zh = (f"有序对任务（64 类，随机 {ms['chance'].fmt()}），单层，D = 32：1 个 d_k=32 的头准确率 "
               f"{ms['acc_h1'].fmt()}，"
               f"2 个 16 维的头 {ms['acc_h2'].fmt()}，8 个 4 维的头 {ms['acc_h8'].fmt()}。8 个小头中 "
               f"{ms['heads_on_offset1_h8'].fmt()} 个最关注前一个 token，{ms['heads_on_offset2_h8'].fmt()} 个最关注再前"
               "一个；"
               f"各头注意力模式的差异为 {div.fmt()}（总变差，0 表示完全相同）"
               + ("——它们学到的几乎是同一个模式。" if same else "。"))
    rows = per_seed(ms, "acc_h1", "acc_h8")
    works = [a8 >= WORKS for _, a8 in rows]
    beats = [a8 >= a1 + BEATS for a1, a8 in rows]
    worse = [a8 < a1 - BEATS for a1, a8 in rows]
    if all(works) and all(beats):
        return Verdict("supported", nums_en, nums_zh)
    if all(works) and not any(beats):
        return Verdict("nuanced", nums_en + " Heads of 4 dimensions do work, but one full-size head did as well: on "
                       "this task the split into parallel subspaces is not where the power comes from.",
                       nums_zh + "4 维的头确实能工作，但一个全尺寸的头做得一样好：在这个任务上，力量并非来自并行子空间"
                                 "的拆分。")
    if all(worse):
        return Verdict("refuted", nums_en + " The small heads did clearly worse than one big head: head size matters "
                       "here.", nums_zh + "小头明显不如一个大头：这里头的大小是有影响的。")
    return seeds_disagree(nums_en, nums_zh)


claim("C47-small-heads-parallel-subspaces", section="§5.1",
      zh="d_k=4虽然只有4维但每个头仍然能独立学习自己的模式这说明“多头的力量来自并行子空间而不是来自每个头有多大”这个结"
         "论真的成立",
      en="Even d_k = 4 heads learn their own patterns: multi-head power comes from parallel subspaces, not head size.",
      experiment="tiny-heads",
      metrics=("acc_h1", "acc_h2", "acc_h8", "chance", "heads_on_offset1_h8", "heads_on_offset2_h8",
               "head_diversity_h8"),
      rule=_c47,
      rule_text="One layer, D = 32, the target at t is the ordered pair (x[t-1], x[t-2]). Supported if 8 heads of "
                f"d_k = 4 reach ≥ {WORKS} accuracy and beat one head of d_k = 32 by ≥ {BEATS} on every seed; nuanced "
                f"if they reach {WORKS} but do not beat it on any seed; refuted if they are worse by > {BEATS} on "
                "every "
                "seed; otherwise inconclusive.")


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
    other[:, half:] = torch.randint(0, int(ids.max()) + 1, other[:, half:].shape, generator=g)
    model.eval()
    with torch.no_grad():
        a, b = model(input_ids=ids).logits[:, :half], model(input_ids=other).logits[:, :half]
    return ((a - b).abs().max() / a.abs().max()).item()


@experiment("block-faults")
def block_faults(ctx):
    T, batch = 32, 16
    steps = budget(ctx.preset, 30, 200, 800)
    layers = budget(ctx.preset, 2, 3, 6)
    lrs = budget(ctx.preset, (3e-3,), (3e-3,), (3e-3, 1e-2))
    task = MarkovTask(vocab=16, lags=(1, 2), p=0.9, seed=ctx.seed)
    g = torch.Generator().manual_seed(ctx.seed)
    train = task.sample(steps * batch, T, g)
    held = task.sample(64, T, g)

    def batches(step):
        return task.batch(train[step * batch:(step + 1) * batch])

    out: dict[str, float] = {"floor": task.floor, "uniform": task.uniform, "n_layers": layers}
    curves = {}
    for arm in ("correct", "split_without_transpose", "norm_on_residual_path", "shared_layernorm"):
        stats = []
        for lr in lrs:
            torch.manual_seed(ctx.seed)
            model = build_model(ModelConfig(vocab_size=task.vocab, d_model=32, n_heads=4, n_layers=layers,
                                            max_seq_len=T, init="xavier", scale_embeddings=True))
            if arm != "correct":
                pitfalls.apply(model, arm)  # stays on: this model is only ever the faulty one
            losses = fit(model, batches, steps, lr=lr)
            stats.append(curve_stats(losses, uniform=task.uniform))
            curves.setdefault(arm, losses)
        key = {"correct": "correct", "split_without_transpose": "split", "norm_on_residual_path": "miswired",
               "shared_layernorm": "shared"}[arm]
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
    torch.manual_seed(ctx.seed)
    probe = build_model(ModelConfig(vocab_size=task.vocab, d_model=32, n_heads=4, n_layers=2, max_seq_len=T))
    ref = probe(input_ids=held[:2]).logits
    for fault, key in (("split_without_transpose", "split"), ("merge_wrong_transpose", "merge")):
        try:
            with pitfalls.inject(probe, fault):
                bad = probe(input_ids=held[:2]).logits
            out[f"raised_{key}"], out[f"same_shape_{key}"] = 0.0, float(bad.shape == ref.shape)
            out[f"output_change_{key}"] = ((bad - ref).abs().max() / ref.abs().max()).item()
        except Exception:  # noqa: BLE001 — any error at all means the bug is not silent
            out[f"raised_{key}"], out[f"same_shape_{key}"], out[f"output_change_{key}"] = 1.0, 0.0, float("nan")

    def draw(ax):
        for arm, losses in curves.items():
            if arm == "correct":
                ax.plot(losses, color="k", ls="--", lw=1.6, zorder=3, label="correct block")
            else:
                ax.plot(losses, lw=1.1, label=arm)
        ax.axhline(task.floor, color="k", ls=":", lw=0.8, label="best possible (honest)")
        ax.set(xlabel="step", ylabel="train loss (nats)", ylim=(0, task.uniform * 1.4),
               title=f"Silent bugs from the zoo, {layers}-layer Pre-Norm LM (lr {lrs[0]:g})")
        ax.legend(fontsize=8)
    figure(ctx.figure_path("C48-silent-bugs-training"), draw, size=(7, 4))
    return finite_metrics(out)


def _c48(ms):
    if max(ms["raised_split"].values) or max(ms["raised_merge"].values):
        return Verdict("refuted", "The wrong transpose raised an error: it is not silent.",
                       "错误的转置直接报错了：它并不是静默的。")
    nums_en = (f"Neither a split without the transpose nor a merge without it raises or changes a shape (output "
               f"values change by {ms['output_change_split'].fmt()} and {ms['output_change_merge'].fmt()}). Trained "
               f"with the split bug, the teacher-forced validation loss is {ms['tf_loss_split'].fmt()} (correct model "
               f"{ms['tf_loss_correct'].fmt()}; best honest loss {ms['floor'].fmt()}), but predicting from the prefix "
               f"alone, as in generation, it is {ms['prefix_loss_split'].fmt()} (correct "
               f"{ms['prefix_loss_correct'].fmt()}): "
               f"changing future tokens moves its past logits by {ms['future_leak_split'].fmt()} "
               f"(correct {ms['future_leak_correct'].fmt()}).")
    nums_zh = (f"拆头不转置、并头不转置都不会报错，也不改变形状（输出数值分别变化 {ms['output_change_split'].fmt()} 和 "
               f"{ms['output_change_merge'].fmt()}）。带着拆头错误训练后，teacher forcing 的验证 loss 为 "
               f"{ms['tf_loss_split'].fmt()}（正确模型 {ms['tf_loss_correct'].fmt()}；诚实的最优 {ms['floor'].fmt()}）"
               "，"
               f"但像生成时那样只用前缀预测则为 {ms['prefix_loss_split'].fmt()}（正确 "
               f"{ms['prefix_loss_correct'].fmt()}）："
               f"改动未来的 token 会让它过去位置的 logits 变化 {ms['future_leak_split'].fmt()}（正确模型 "
               f"{ms['future_leak_correct'].fmt()}）。")
    rows = per_seed(ms, "tf_loss_split", "tf_loss_correct", "prefix_loss_split", "prefix_loss_correct")
    hurt = [ps > pc + TOL for _, _, ps, pc in rows]
    looks_better = [ts < tc - TOL for ts, tc, _, _ in rows]
    if all(hurt) and all(looks_better):
        return Verdict("nuanced", nums_en + " Silent, yes — but the training and validation numbers look *better*, "
                       "because mixing heads leaks future tokens into the past; only an honest, generation-style "
                       "evaluation shows the damage.",
                       nums_zh + "确实是静默的——但训练和验证指标反而看起来“更好”，因为串味的头把未来 token 泄露给了过"
                                 "去；"
                       "只有诚实的、按生成方式的评估才能看到损害。")
    if all(hurt):
        return Verdict("supported", nums_en, nums_zh)
    if not any(hurt):
        return Verdict("refuted", nums_en + " The bug did not lower accuracy here.", nums_zh + "这里该错误没有降低准确"
                                                                                               "率。")
    return seeds_disagree(nums_en, nums_zh)


claim("C48-wrong-transpose-silent", section="§5.2",
      zh="拆头时如果不小心多转置了一个轴或者转置顺序错了结果不是报错而是每个头的输入数据被“串味”。因为维度形状没变程序"
         "不会提示错误但准确率会诡异下降",
      en="A wrong transpose when splitting heads raises no error; it only shows up as an odd drop in accuracy.",
      experiment="block-faults",
      metrics=("raised_split", "raised_merge", "output_change_split", "output_change_merge", "tf_loss_split",
               "tf_loss_correct", "prefix_loss_split", "prefix_loss_correct", "future_leak_split",
               "future_leak_correct", "floor"),
      rule=_c48,
      rule_text="The zoo's split_without_transpose and merge_wrong_transpose. Refuted if either raises. Otherwise, "
                "trained with the split bug on the order-2 Markov LM: 'accuracy drops' = the prefix-only "
                f"(generation-style) loss is > {TOL} nats worse than the correct model's on every seed → supported; "
                f"nuanced if in addition the teacher-forced loss is > {TOL} nats *better* (the bug leaks the future "
                "and "
                "flatters the usual metric); refuted if the prefix loss is not worse on any seed; else inconclusive.")


def _c50(ms):
    nums_en = (f"{fmt_count(ms['n_layers'])} layers: the Pre-Norm block wired as x = norm(x); x = x + f(x) ends at "
               f"{ms['final_miswired'].fmt()} vs {ms['final_correct'].fmt()} for the correct wiring; roughness (climb-"
               f"back per unit of descent) {ms['rough_miswired'].fmt()} vs {ms['rough_correct'].fmt()}, largest rise "
               f"{ms['spike_miswired'].fmt()} vs {ms['spike_correct'].fmt()} nats.")
    nums_zh = (f"{fmt_count(ms['n_layers'])} 层：接成 x = norm(x); x = x + f(x) 的 Pre-Norm block 最终 loss 为 "
               f"{ms['final_miswired'].fmt()}，正确接法为 {ms['final_correct'].fmt()}；粗糙度（每下降一单位回升多少）"
               f"{ms['rough_miswired'].fmt()} 对 {ms['rough_correct'].fmt()}，最大回升 {ms['spike_miswired'].fmt()} 对 "
               f"{ms['spike_correct'].fmt()} nat。")
    rows = per_seed(ms, "rough_miswired", "rough_correct", "spike_miswired", "spike_correct", "final_miswired",
                    "final_correct")
    erratic = [rm > rc + ROUGHER or sm > sc + SPIKIER for rm, rc, sm, sc, _, _ in rows]
    worse = [fm > fc + TOL for *_, fm, fc in rows]
    if all(erratic):
        return Verdict("supported", nums_en, nums_zh)
    if not any(erratic) and all(worse):
        return Verdict("nuanced", nums_en + " The miswired block trains worse, but not erratically.",
                       nums_zh + "接错的 block 训练得更差，但曲线并没有乱跳。")
    if not any(erratic) and not any(worse):
        return Verdict("refuted", nums_en + " It trained as well and as smoothly as the correct block.",
                       nums_zh + "它训练得和正确的 block 一样好、一样平滑。")
    return seeds_disagree(nums_en, nums_zh)


claim("C50-miswired-pre-norm-erratic", section="§5.2",
      zh="我一开始套用Post-Norm的模板改成Pre-Norm时在输入和输出之间拉错了分支线导致Norm放在残差之后又被重复使用训练曲线"
         "一路乱跳",
      en="A Pre-Norm block wired with the norm on the residual path (norm reused after the residual) trains "
         "erratically.",
      experiment="block-faults",
      metrics=("n_layers", "final_miswired", "final_correct", "rough_miswired", "rough_correct", "spike_miswired",
               "spike_correct"),
      rule=_c50,
      rule_text="The zoo's norm_on_residual_path vs the correct Pre-Norm block, same data and init. Erratic = "
                f"roughness (climb-back per unit of descent of the smoothed curve) higher by > {ROUGHER} or largest "
                f"rise higher by > {SPIKIER} nats. Supported if erratic on every seed; nuanced if not erratic on any "
                f"seed but > {TOL} nats worse at the end on every seed; refuted if neither on any seed; else "
                "inconclusive.")


def _c51(ms):
    diffs = [s - c for s, c in per_seed(ms, "final_shared", "final_correct")]
    d = fmt_values(diffs, " nats")
    saved = [c - s for c, s in per_seed(ms, "params_correct", "params_shared")]
    nums_en = (f"{fmt_count(ms['n_layers'])} layers: sharing one LayerNorm between the two sub-layers of each block "
               "saves "
               f"{fmt_values(saved)} parameters and ends at {ms['final_shared'].fmt()} vs {ms['final_correct'].fmt()} "
               f"(shared − separate = {d}).")
    nums_zh = (f"{fmt_count(ms['n_layers'])} 层：每个 block 的两个子层共用一个 LayerNorm，省下 {fmt_values(saved)} 个参"
               "数，"
               "最终 loss "
               f"{ms['final_shared'].fmt()}，分开时 {ms['final_correct'].fmt()}（共用 − 分开 = {d}）。")
    if all(x > TOL for x in diffs):
        return Verdict("supported", nums_en, nums_zh)
    if all(abs(x) <= TOL for x in diffs):
        return Verdict("refuted", nums_en + " No clear drop: the loss stayed within the tolerance.",
                       nums_zh + "没有明显下降：loss 差异在容差之内。")
    if all(x < -TOL for x in diffs):
        return Verdict("refuted", nums_en + " Sharing was even better here.", nums_zh + "这里共用反而更好。")
    return seeds_disagree(nums_en, nums_zh)


claim("C51-shared-layernorm-hurts", section="§5.3",
      zh="每一个LayerNorm都需要分别拥有自己的可学习参数gamma和beta不能两个层共享同一组参数。我见过有人为了省事共用了参"
         "数结果模型表达能力明显下降",
      en="Sharing LayerNorm parameters between sub-layers clearly reduces the model's expressiveness.",
      experiment="block-faults",
      metrics=("n_layers", "final_shared", "final_correct", "params_shared", "params_correct"),
      rule=_c51,
      rule_text="The zoo's shared_layernorm vs separate norms, same data and init. Supported if sharing ends > "
                f"{TOL} "
                f"nats worse on every seed; refuted if the difference stays within ±{TOL} (no clear drop) or sharing "
                "is "
                f"better by > {TOL} on every seed; otherwise inconclusive.")


# --- C49 ------------------------------------------------------------------------------------------------------

@experiment("padding-pe")
def padding_pe(ctx):
    torch.manual_seed(ctx.seed)
    cfg = dict(vocab_size=32, d_model=32, n_heads=4, n_layers=2, max_seq_len=32, positional="sinusoidal")
    lm = build_model(ModelConfig(architecture="decoder_lm", **cfg)).double().eval()
    torch.manual_seed(ctx.seed)
    enc = build_model(ModelConfig(architecture="encoder", **cfg)).double().eval()
    g = torch.Generator().manual_seed(ctx.seed)
    n, pad = 7, 5
    seq = torch.randint(1, 32, (1, n), generator=g)
    other = torch.randint(1, 32, (1, n + pad), generator=g)

    def rel(a, b):
        return ((a - b).abs().max() / a.abs().max()).item()

    with torch.no_grad():
        alone = lm(input_ids=seq).logits[0]
        right = torch.cat([torch.cat([seq, torch.zeros(1, pad, dtype=torch.long)], 1), other])
        right_mask = torch.ones_like(right)
        right_mask[0, n:] = 0
        right_junk = right.clone()
        right_junk[0, n:] = torch.randint(1, 32, (pad,), generator=g)  # other pad contents, same mask
        left = torch.cat([torch.cat([torch.zeros(1, pad, dtype=torch.long), seq], 1), other])
        left_mask = torch.ones_like(left)
        left_mask[0, :pad] = 0
        out = {
            "right_pad_diff": rel(alone, lm(input_ids=right, attention_mask=right_mask).logits[0, :n]),
            "pad_content_diff": rel(alone, lm(input_ids=right_junk, attention_mask=right_mask).logits[0, :n]),
            "left_pad_diff": rel(alone, lm(input_ids=left, attention_mask=left_mask).logits[0, pad:]),
            "left_pad_naive_positions_diff": rel(alone, lm(input_ids=left, attention_mask=left_mask,
                                                           position_ids=torch.arange(n + pad)[None].expand(2, -1)
                                                           ).logits[0, pad:]),
        }
        e_alone = enc(seq).last_hidden_state[0]
        e_junk = enc(right_junk, attention_mask=right_mask).last_hidden_state[0, :n]
        out["encoder_pad_diff"] = rel(e_alone, e_junk)
    return finite_metrics(out)


def _c49(ms):
    names = ("right_pad_diff", "pad_content_diff", "left_pad_diff", "encoder_pad_diff")
    worst = [max(v) for v in per_seed(ms, *names)]
    en = (f"With the padding masked as keys, the positional vectors (and the contents) of pad positions never reach "
          f"a real token: real-token outputs change by {fmt_values(worst)} (float64; right padding, other pad "
          f"contents, left padding, bidirectional encoder). The real hazard is elsewhere: with left padding and "
          f"positions counted from 0 instead of from the mask, the real tokens' own positions shift and their "
          f"outputs change by {ms['left_pad_naive_positions_diff'].fmt()}.")
    zh = ("只要 padding 作为 key 被 mask 掉，padding 位置上的位置编码（以及内容）就不会影响任何真实 token：真实 token "
          "的输出变化 "
          f"{fmt_values(worst)}（float64；右 padding、改变 pad 内容、左 padding、双向编码器）。真正的风险在别处：左 "
          "padding 时"
          f"若位置从 0 数起而不是按 mask 计算，真实 token 自己的位置会整体偏移，输出变化 "
          f"{ms['left_pad_naive_positions_diff'].fmt()}。")
    if all(w < UNCHANGED for w in worst):
        return Verdict("supported", en + f" Below {num(UNCHANGED)} on every seed: unchanged.",
                       zh + f"每个种子上都低于 {num(UNCHANGED)}：没有变化。")
    if all(w > CHANGED for w in worst):
        return Verdict("refuted", en + f" Above {num(CHANGED)} on every seed: the padding does reach real tokens.",
                       zh + f"每个种子上都高于 {num(CHANGED)}：padding 确实影响了真实 token。")
    return Verdict("inconclusive", en + f" Between {num(UNCHANGED)} and {num(CHANGED)}, or the seeds disagree.",
                   zh + f"介于 {num(UNCHANGED)} 与 {num(CHANGED)} 之间，或各种子不一致。")


claim("C49-pe-on-padding-harmless", section="§5.2",
      zh="Padding部分虽然被mask遮掉了但位置编码还是会加到Padding的向量上。这个小误差通常不会对训练产生大影响",
      en="Positional encodings are added to padding vectors too, a small error that usually does not matter.",
      experiment="padding-pe",
      metrics=("right_pad_diff", "pad_content_diff", "left_pad_diff", "encoder_pad_diff",
               "left_pad_naive_positions_diff"),
      rule=_c49,
      rule_text="Untrained models in float64, padding passed as attention_mask. Supported if the real tokens' outputs "
                f"are unchanged (< {num(UNCHANGED)} relative) by padding on either side, by other pad contents "
                f"and in the "
                f"encoder, on every seed; refuted if they change by > {num(CHANGED)} on every seed; otherwise "
                "inconclusive.")


# --- C52, C54 ---------------------------------------------------------------------------------------------------

@experiment("ffn-width")
def ffn_width(ctx):
    d, T, batch = 32, 32, 16
    steps = budget(ctx.preset, 30, 200, 800)
    widths = budget(ctx.preset, (1, 4, 8), (1, 4, 8), (1, 2, 4, 8))
    task = MarkovTask(vocab=16, lags=(1, 2), p=0.9, seed=ctx.seed)
    g = torch.Generator().manual_seed(ctx.seed)
    train = task.sample(steps * batch, T, g)
    val = task.batch(task.sample(128, T, g))
    small_ids = task.sample(budget(ctx.preset, 32, 128, 128), T, g)  # a small training set, to overfit
    small = task.batch(small_ids)
    small_steps = budget(ctx.preset, 30, 200, 600)
    pick = torch.randint(0, len(small_ids), (small_steps, batch), generator=g)

    def model(d_ff, attn_drop=0.0, ffn_drop=0.0):
        torch.manual_seed(ctx.seed)
        m = build_model(ModelConfig(vocab_size=task.vocab, d_model=d, n_heads=4, n_layers=2, d_ff=d_ff,
                                    max_seq_len=T, init="xavier", scale_embeddings=True))
        for block in m.stack.blocks:  # dropout on one sub-layer's output only, same rate
            block.attn_add_norm.dropout.p, block.ffn_add_norm.dropout.p = attn_drop, ffn_drop
        return m

    def evaluate(m, batch_):
        m.eval()
        with torch.no_grad():
            return m(**batch_).loss.item()

    out: dict[str, float] = {"floor": task.floor}
    for w in widths:
        m = model(w * d)
        fit(m, lambda step: task.batch(train[step * batch:(step + 1) * batch]), steps, lr=3e-3)
        out[f"val_ff{w}x"] = evaluate(m, val)
    gaps = {}
    for name, kw in (("ff1x", dict(d_ff=d)), ("ff4x", dict(d_ff=4 * d)),
                     ("ff4x_attn_dropout", dict(d_ff=4 * d, attn_drop=0.3)),
                     ("ff4x_ffn_dropout", dict(d_ff=4 * d, ffn_drop=0.3))):
        m = model(**kw)
        fit(m, lambda step: task.batch(small_ids[pick[step]]), small_steps, lr=3e-3)
        tr, va = evaluate(m, small), evaluate(m, val)
        out[f"gap_{name}"], out[f"val_small_{name}"] = va - tr, va
        gaps[name] = (tr, va)
    out["n_train_tokens_small"] = float(small["input_ids"].numel())

    def draw(axes):
        ax, gx = axes
        ax.plot(list(widths), [out[f"val_ff{w}x"] for w in widths], "o-")
        ax.axhline(task.floor, color="k", ls=":", lw=0.8, label="best possible")
        ax.set(xscale="log", xlabel="d_ff / d_model", ylabel="validation loss",
               title=f"FFN width, {steps} steps of fresh data")
        ax.minorticks_off()
        ax.set_xticks(list(widths), [f"{w}×" for w in widths])
        ax.legend(fontsize=8)
        names = list(gaps)
        xs = torch.arange(len(names)).numpy()
        gx.bar(xs - 0.2, [gaps[k][0] for k in names], 0.4, label="train (the small set)")
        gx.bar(xs + 0.2, [gaps[k][1] for k in names], 0.4, label="validation")
        labels = {"ff1x": "d_ff = D", "ff4x": "d_ff = 4D", "ff4x_attn_dropout": "4D + dropout\non attention",
                  "ff4x_ffn_dropout": "4D + dropout\non FFN"}
        gx.set_xticks(xs, [labels[k] for k in names])
        gx.set(ylabel="loss", ylim=(0, max(v for _, v in gaps.values()) * 1.3),
               title=f"Overfitting a small training set ({small['input_ids'].numel()} tokens)")
        gx.legend(fontsize=8, loc="upper right", ncol=2)
    figure(ctx.figure_path("C52-ffn-width-and-overfitting"), draw, grid=(1, 2), size=(11, 4))
    return finite_metrics(out)


def _c52(ms):
    widths = [k for k in ("val_ff1x", "val_ff2x", "val_ff4x", "val_ff8x") if k in ms]
    rows = per_seed(ms, *widths)
    i4, i1 = widths.index("val_ff4x"), widths.index("val_ff1x")
    near_best = [r[i4] <= min(r) + TOL for r in rows]
    pays = [r[i1] > r[i4] + TOL for r in rows]
    nums = ", ".join(f"{k[6:]} {ms[k].fmt()}" for k in widths)
    lit_en = (" In the literature: 4× in the 2017 paper, BERT, GPT-2/3 and T5; gated FFNs keep about the same "
              "parameters with 8/3× (LLaMA 1) or go to 3.5× (Mistral 7B, LLaMA 2 70B).")
    lit_zh = ("文献中：2017 年论文、BERT、GPT-2/3、T5 用 4 倍；门控 FFN 用 8/3 倍保持参数量相当（LLaMA 1），或用 3.5 倍"
              "（Mistral 7B、LLaMA 2 70B）。")
    en = f"Validation loss by d_ff/d_model: {nums}."
    zh = f"按 d_ff/d_model 的验证 loss：{nums}。"
    if all(near_best) and all(pays):
        return Verdict("supported", en + f" 4× is within {TOL} nats of the best width and clearly better than "
                                         "1×." + lit_en,
                       zh + f"4 倍与最佳宽度相差不到 {TOL} nat，且明显优于 1 倍。" + lit_zh)
    if not any(near_best) and not any(pays):
        return Verdict("refuted", en + " 4× is neither near the best nor better than 1×." + lit_en,
                       zh + "4 倍既不接近最佳，也不优于 1 倍。" + lit_zh)
    if all(near_best) or all(pays):
        part = ("4× is near the best, but 1× is about as good: width barely matters here" if all(near_best)
                else "4× beats 1×, but a wider FFN is clearly better still")
        part_zh = ("4 倍接近最佳，但 1 倍也差不多：这里宽度影响不大" if all(near_best)
                   else "4 倍优于 1 倍，但更宽的 FFN 明显更好")
        return Verdict("nuanced", en + f" {part}." + lit_en, zh + f"{part_zh}。" + lit_zh)
    return Verdict("inconclusive", en + " The seeds disagree." + lit_en, zh + "各种子结论不一致。" + lit_zh)


claim("C52-dff-four-times", section="§5.3",
      zh="d_ff一般取d_model的4倍左右这是论文里的经验值后续的变体也都遵循类似的扩大策略",
      en="d_ff is usually about 4 × d_model, and later variants follow a similar expansion.",
      experiment="ffn-width", metrics=("val_ff1x", "val_ff4x", "val_ff8x", "floor"),
      rule=_c52,
      rule_text="2-layer LM, D = 32, on the order-2 Markov task (the next token is a table lookup on two tokens: FFN "
                f"work), equal steps of fresh data. Supported if 4× is within {TOL} nats of the best width and > {TOL} "
                "better than 1× on every seed; refuted if neither on any seed; nuanced if one of the two holds on "
                "every seed; otherwise inconclusive. The literature half is cited in the reason.")


def _c54(ms):
    g1, g4 = ms["gap_ff1x"], ms["gap_ff4x"]
    ga, gf = ms["gap_ff4x_attn_dropout"], ms["gap_ff4x_ffn_dropout"]
    rows = per_seed(ms, "gap_ff1x", "gap_ff4x", "gap_ff4x_attn_dropout", "gap_ff4x_ffn_dropout")
    grows = [b > a + TOL for a, b, _, _ in rows]
    ffn_site = [f < a - DROPOUT_SITE for _, _, a, f in rows]
    nums_en = (f"Train-validation gap on a small training set ({fmt_count(ms['n_train_tokens_small'])} tokens): "
               f"d_ff = D {g1.fmt()}, d_ff = 4D {g4.fmt()}; at 4D with dropout 0.3 on the attention output "
               f"{ga.fmt()}, on the FFN output {gf.fmt()}.")
    nums_zh = (f"小训练集（{fmt_count(ms['n_train_tokens_small'])} 个 token）上的训练-验证差距：d_ff = D 时 "
               f"{g1.fmt()}，"
               f"d_ff = 4D 时 {g4.fmt()}；4D 且在注意力输出上加 0.3 dropout 时 {ga.fmt()}，在 FFN 输出上加时 "
               f"{gf.fmt()}。")
    if all(grows) and all(ffn_site):
        return Verdict("supported", nums_en + " A wider FFN overfits more, and dropout there closes more of the gap "
                       "than the same dropout on attention.",
                       nums_zh + "FFN 越宽过拟合越严重，而且在 FFN 上加 dropout 比在注意力上加同样的 dropout 更能缩小差"
                                 "距。")
    if all(grows) or all(ffn_site):
        part = ("a wider FFN overfits more" if all(grows) else "dropout on the FFN closes more of the gap")
        part_zh = "FFN 越宽过拟合越严重" if all(grows) else "在 FFN 上加 dropout 更能缩小差距"
        return Verdict("nuanced", nums_en + f" Only half of it holds on every seed: {part}.",
                       nums_zh + f"只有一半在每个种子上成立：{part_zh}。")
    if not any(grows) and not any(ffn_site):
        return Verdict("refuted", nums_en + " Neither a wider FFN nor dropout placement points at the FFN.",
                       nums_zh + "FFN 宽度和 dropout 的位置都没有指向 FFN 是过拟合的主要来源。")
    return seeds_disagree(nums_en, nums_zh)


claim("C54-ffn-overfits", section="§5.3",
      zh="大的前馈层…通常也是过拟合最容易发生的地方之一",
      en="The large FFN is one of the places where overfitting most easily happens.",
      experiment="ffn-width",
      metrics=("gap_ff1x", "gap_ff4x", "gap_ff4x_attn_dropout", "gap_ff4x_ffn_dropout", "n_train_tokens_small"),
      rule=_c54,
      rule_text="A 2-layer LM trained for many epochs on a small set (128 sequences) of the order-2 Markov task. Two "
                "signs: the "
                f"train–validation gap grows by > {TOL} nats from d_ff = D to 4D, and dropout 0.3 on the FFN output "
                f"leaves a gap > {DROPOUT_SITE} nats smaller than the same dropout on the attention output. Supported "
                "if both "
                "on every seed, nuanced if one on every seed, refuted if neither on any seed; else inconclusive.")


# --- C55 (judged on the add_norm grid) ------------------------------------------------------------------------

def _c55(ms):
    init = [f for f in ms["failed_large_init"].values]
    lr = [f for f in ms["failed_high_lr"].values]
    order = [f for f in ms["failed_post_any_lr"].values]
    healthy = all(v == 0 for v in ms["failed_pre_mid"].values)
    nums_en = (f"From a healthy Pre-Norm run (failed: {ms['failed_pre_mid'].fmt()}), changing one thing: a 10× "
               f"attention init → failed {ms['failed_large_init'].fmt()} (NaN {ms['nan_large_init'].fmt()}, final "
               f"{ms['final_large_init'].fmt()}); 10× the learning rate → failed {ms['failed_high_lr'].fmt()} (NaN "
               f"{ms['nan_high_lr'].fmt()}, final {ms['final_high_lr'].fmt()}); Post- instead of Pre-Norm → failed at "
               f"some learning rate: {ms['failed_post_any_lr'].fmt()}.")
    nums_zh = (f"从一个健康的 Pre-Norm 运行出发（失败：{ms['failed_pre_mid'].fmt()}），每次只改一处：注意力初始化放大 "
               "10 倍 → 失败 "
               f"{ms['failed_large_init'].fmt()}（NaN {ms['nan_large_init'].fmt()}，最终 "
               f"{ms['final_large_init'].fmt()}）；"
               f"学习率放大 10 倍 → 失败 {ms['failed_high_lr'].fmt()}（NaN {ms['nan_high_lr'].fmt()}，最终 "
               f"{ms['final_high_lr'].fmt()}）；Post-Norm 代替 Pre-Norm → 在某个学习率失败："
               f"{ms['failed_post_any_lr'].fmt()}。")
    causes = [sum(x) for x in zip(init, lr, order)]
    if not healthy:
        return Verdict("inconclusive", nums_en + " The baseline itself failed.", nums_zh + "基线本身就失败了。")
    if all(c == 3 for c in causes):
        return Verdict("supported", nums_en + " Each of the three suspects, alone, breaks training.",
                       nums_zh + "三个嫌疑因素中的每一个单独出现都会破坏训练。")
    if all(c == 0 for c in causes):
        return Verdict("refuted", nums_en + " None of the three broke training on its own.",
                       nums_zh + "三个因素单独出现都没有破坏训练。")
    names = [("the init", "初始化", init), ("the learning rate", "学习率", lr), ("the norm order", "Norm 顺序", order)]
    always = [(en, zh) for en, zh, vals in names if all(v > 0 for v in vals)]
    never = [(en, zh) for en, zh, vals in names if all(v == 0 for v in vals)]
    if len(always) + len(never) == 3:
        return Verdict("nuanced", nums_en + f" Only {' and '.join(e for e, _ in always)} broke training when "
                       "changed alone "
                       f"(not {' and '.join(e for e, _ in never)}); a failure with no NaN is a stall, not an "
                       "explosion.",
                       nums_zh + f"只有{'、'.join(z for _, z in always)}单独就能破坏训练（"
                                 f"{'、'.join(z for _, z in never)}"
                       "不能）；没有 NaN 的失败是停滞，不是爆炸。")
    return seeds_disagree(nums_en, nums_zh)


claim("C55-explosion-debug-order", section="结尾",
      zh="代码跑不通先检查形状形状对了但效果差先看mask和缩放因子train loss爆炸再检查初始化、Norm顺序和学习率",
      en="When the training loss explodes, check the initialisation, the norm order and the learning rate.",
      experiment="norm-depth-grid",
      metrics=("failed_pre_mid", "failed_large_init", "nan_large_init", "final_large_init", "failed_high_lr",
               "nan_high_lr", "final_high_lr", "failed_post_any_lr"),
      rule=_c55,
      rule_text="Deepest grid depth, no warm-up, no clipping; the baseline is Pre-Norm at lr 3e-3. Each suspect is "
                "changed alone: attention weights ×10 (the zoo's large_init_scale), lr ×10, Post-Norm instead of "
                "Pre-Norm (failed at any learning rate of the sweep). 'Failed' = NaN or final loss within 0.1 nats of "
                "uniform guessing. Supported if all three fail on every seed; nuanced if the same 1–2 do on every "
                "seed; refuted if none does; inconclusive if the baseline failed or the seeds disagree.")
