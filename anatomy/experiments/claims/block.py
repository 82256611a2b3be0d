"""§5: the whole block, exactly (claims C46, C47, C49, C53).

``block-anatomy``  the post's §5.1 shape table against a traced forward pass (C46) and where a block's parameters
                   sit (C53).
``tiny-heads``     an ordered-pair task that needs two relations at once, one layer, D = 32 split into 1, 2 or 8
                   heads (d_k = 32, 16, 4) (C47).
``padding-pe``     exact float64 checks: does the positional encoding added to padding reach the real tokens (C49)?

The block's silent bugs, trained (C48, C50, C51) and the debugging order (C55) are in ``block_faults``; the FFN's
width and overfitting (C52, C54) in ``ffn_width``.
"""

from __future__ import annotations

from typing import Any

import torch

from anatomy import ModelConfig
from anatomy.components.block import EncoderBlock
from anatomy.experiments.devices import cpu_draws, on
from anatomy.experiments.figures import figure
from anatomy.experiments.fitting import budget, build, finite_metrics, fit
from anatomy.experiments.registry import Metric, Trial, Verdict, claim, experiment
from anatomy.experiments.rules import decide, fmt_count, fmt_values, num, per_seed
from anatomy.inspection import capture, trace_model

FFN_SHARE = 0.5  # C53: the FFN holds more than this share of the block's parameters
WORKS, BEATS = 0.9, 0.1  # C47: accuracy the small heads must reach; margin (accuracy) that counts as beating / worse
UNCHANGED, CHANGED = 1e-9, 1e-6  # C49: relative change of real-token outputs that is none / a real change


def _n(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


# --- C46, C53 ---------------------------------------------------------------------------------------------------

# The post's §5.1 table (B=2, S=10, d_model=16, h=4, d_k=4), by kind of step. ``softmax`` and the FFN hidden layer
# are not rows of the post's table; softmax is checked too (its shape follows from the table's scores).
POST_TABLE = {
    "embed": (2, 10, 16),
    "proj": (2, 10, 16),
    "split": (2, 4, 10, 4),
    "scores": (2, 4, 10, 10),
    "softmax": (2, 4, 10, 10),
    "z": (2, 4, 10, 4),
    "merge": (2, 10, 16),
    "out": (2, 10, 16),
    "add": (2, 10, 16),
    "norm": (2, 10, 16),
    "ffn": (2, 10, 16),
}


@experiment("block-anatomy")
def block_anatomy(trial: Trial) -> dict[str, float]:
    torch.manual_seed(trial.seed)
    model = build(
        ModelConfig(
            architecture="encoder",
            vocab_size=32,
            d_model=16,
            n_heads=4,
            n_layers=1,
            d_ff=64,
            norm_position="post",
            activation="relu",
            max_seq_len=16,
        ),
        trial.device,
    )
    ids = on(trial.device, lambda: torch.randint(0, 32, (2, 10), generator=torch.Generator().manual_seed(trial.seed)))
    rows = trace_model(model, {"input_ids": ids})
    checked = [r for r in rows if r.kind in POST_TABLE]
    out = {
        "rows_checked": len(checked),
        "shape_mismatches": sum(tuple(r.shape) != POST_TABLE[r.kind] for r in checked),
        "steps_missing": sum(kind not in {r.kind for r in rows} for kind in POST_TABLE),
        "ffn_hidden_width": next((r.shape[-1] for r in rows if r.kind == "hidden"), float("nan")),
    }
    out["output_equals_input_shape"] = float(tuple(rows[-1].shape) == tuple(rows[0].shape))

    # C53: where a block's parameters are
    for d, d_ff, act, tag in (
        (512, 2048, "relu", "d512"),
        (16, 64, "relu", "d16"),
        (512, 512, "relu", "d512_ff1x"),
        (512, None, "swiglu", "d512_swiglu"),
    ):
        block = on(trial.device, EncoderBlock.build, d_model=d, n_heads=8 if d == 512 else 4, d_ff=d_ff, activation=act)
        total = _n(block)
        out[f"ffn_share_{tag}"] = _n(block.ffn) / total
        out[f"attn_share_{tag}"] = _n(block.attn) / total
    block = on(trial.device, lambda: EncoderBlock.build(d_model=512, n_heads=8))
    out["norm_share_d512"] = _n(block.attn_add_norm) * 2 / _n(block)

    def draw(ax: Any) -> None:
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

    figure(trial.figure_path("C53-block-parameters"), draw, size=(7, 3))
    return finite_metrics(out)


@claim(
    "C46-block-shape-table",
    experiment="block-anatomy",
    metrics=("rows_checked", "shape_mismatches", "steps_missing", "output_equals_input_shape", "ffn_hidden_width"),
    rule_text="trace_model on a one-block Post-Norm encoder; every traced step of a kind in the post's table "
    "(embedding, Q/K/V, split, scores, softmax, weighted V, merge, output projection, add, norm, FFN) "
    "must have the table's shape. Supported if none differs, none is missing and output shape = input "
    "shape; refuted otherwise.",
)
def _c46(ms: dict[str, Metric]) -> Verdict:
    mis, miss, n = ms["shape_mismatches"], ms["steps_missing"], ms["rows_checked"]
    if max(mis.values) == 0 and max(miss.values) == 0 and min(ms["output_equals_input_shape"].values) == 1:
        return Verdict(
            "supported",
            f"All {fmt_count(n)} traced steps of a real forward pass (B=2, S=10, D=16, h=4) "
            "have the shapes of the post's table, and the block's output has its input's "
            "shape; the table leaves out the FFN's hidden layer, (2, 10, "
            f"{fmt_count(ms['ffn_hidden_width'])}).",
            f"真实前向传播（B=2, S=10, D=16, h=4）中追踪到的全部 {fmt_count(n)} 个步骤都与原文表格的形状一"
            "致，"
            f"block 输出形状等于输入；表格省略了 FFN 的隐藏层 (2, 10, {fmt_count(ms['ffn_hidden_width'])})"
            "。",
        )
    return Verdict(
        "refuted",
        f"{mis.fmt()} traced steps differ from the post's table ({miss.fmt()} missing).",
        f"{mis.fmt()} 个追踪步骤与原文表格不一致（缺失 {miss.fmt()} 个）。",
    )


@claim(
    "C53-ffn-most-parameters",
    experiment="block-anatomy",
    metrics=(
        "ffn_share_d512",
        "attn_share_d512",
        "ffn_share_d16",
        "ffn_share_d512_swiglu",
        "ffn_share_d512_ff1x",
        "norm_share_d512",
    ),
    rule_text=f"Counted: supported if the FFN holds more than {FFN_SHARE:.0%} of the block's parameters and more "
    "than attention at d_ff = 4D; refuted otherwise.",
)
def _c53(ms: dict[str, Metric]) -> Verdict:
    f, a = ms["ffn_share_d512"], ms["attn_share_d512"]
    en = (
        f"At d_ff = 4D the FFN holds {f.fmt()} of a block's parameters, attention {a.fmt()} (the same at D=16: "
        f"{ms['ffn_share_d16'].fmt()}; SwiGLU at 8/3·D: {ms['ffn_share_d512_swiglu'].fmt()}); with d_ff = D it would "
        f"be only {ms['ffn_share_d512_ff1x'].fmt()}."
    )
    zh = (
        f"d_ff = 4D 时 FFN 占一个 block 参数的 {f.fmt()}，注意力占 {a.fmt()}（D=16 时同样为 "
        f"{ms['ffn_share_d16'].fmt()}；8/3·D 的 SwiGLU 为 {ms['ffn_share_d512_swiglu'].fmt()}）；若 d_ff = D 则只有 "
        f"{ms['ffn_share_d512_ff1x'].fmt()}。"
    )
    if all(x > FFN_SHARE and x > y for x, y in per_seed(ms, "ffn_share_d512", "attn_share_d512")):
        return Verdict("supported", en, zh)
    return Verdict("refuted", en, zh)


# --- C47 ------------------------------------------------------------------------------------------------------


def _pair_task(n: int, length: int, k: int, g: torch.Generator) -> dict[str, torch.Tensor]:
    """Tokens in [0, k); at position t the model must name the ordered pair (x[t-1], x[t-2]) (k*k classes)."""
    x = torch.randint(0, k, (n, length), generator=g)
    labels = torch.full((n, length), -100)
    labels[:, 3:] = k * x[:, 1:-2] + x[:, :-3]  # logits at t predict labels[t + 1] = k*x[t-1] + x[t-2]
    return {"input_ids": x, "labels": labels}


@experiment("tiny-heads")
def tiny_heads(trial: Trial) -> dict[str, float]:
    k, T, batch = 8, 24, 32
    steps = budget(trial.preset, 40, 300, 1200)
    heads = budget(trial.preset, (1, 2, 8), (1, 2, 8), (1, 2, 4, 8, 16))
    g, dev = torch.Generator().manual_seed(trial.seed), trial.device
    train = [on(dev, lambda: _pair_task(batch, T, k, g)) for _ in range(steps)]
    val = on(dev, lambda: _pair_task(256, T, k, g))
    out, curves, maps = {"chance": 1 / k**2}, {}, None
    for h in heads:
        torch.manual_seed(trial.seed)
        model = build(
            ModelConfig(
                vocab_size=k * k, d_model=32, n_heads=h, n_layers=1, max_seq_len=T, init="xavier", scale_embeddings=True
            ),
            dev,
        )
        curves[h] = fit(model, lambda step: train[step], steps, lr=3e-3)
        with torch.no_grad(), capture(model, "stack.blocks.0.attn.hook_weights") as cache:
            logits = model(input_ids=val["input_ids"]).logits[:, :-1]
        labels = val["labels"][:, 1:]
        valid = labels != -100
        out[f"acc_h{h}"] = (logits.argmax(-1) == labels)[valid].float().mean().item()
        if h == 8:
            w = next(iter(cache.values())).mean(0)  # (H, T, T) averaged over the batch
            t = torch.arange(4, T, device=w.device)
            prof = torch.stack([w[:, t, t - o].mean(-1) for o in range(4)], dim=-1)  # (H, 4) mass on offsets 0..3
            top = prof.argmax(-1)
            out["heads_on_offset1_h8"] = float((top == 1).sum())
            out["heads_on_offset2_h8"] = float((top == 2).sum())
            p = prof / prof.sum(-1, keepdim=True)
            tv = 0.5 * (p[:, None] - p[None]).abs().sum(-1)  # (H, H) total-variation distance between heads
            out["head_diversity_h8"] = (tv.sum() / (h * (h - 1))).item()
            maps = w.cpu()
    if maps is not None:

        def draw(axes: list[Any]) -> None:
            for i, ax in enumerate(axes):
                ax.imshow(maps[i, :12, :12].numpy(), cmap="Blues", vmin=0, vmax=1)
                ax.set(title=f"head {i}", xticks=[], yticks=[])
            axes[0].set(ylabel="query position", xlabel="key position")
            axes[0].figure.suptitle(
                "8 heads of d_k = 4 after training on the ordered-pair task (accuracy "
                f"{out['acc_h8']:.2f}); target at row t = (token t-1, token t-2)",
                fontsize=10,
            )

        figure(trial.figure_path("C47-eight-heads-of-size-4"), draw, grid=(1, 8), size=(14, 2.6))
    return finite_metrics(out)


@claim(
    "C47-small-heads-parallel-subspaces",
    experiment="tiny-heads",
    metrics=("acc_h1", "acc_h2", "acc_h8", "chance", "heads_on_offset1_h8", "heads_on_offset2_h8", "head_diversity_h8"),
    rule_text="One layer, D = 32, the target at t is the ordered pair (x[t-1], x[t-2]). Supported if 8 heads "
    f"of d_k = 4 reach ≥ {WORKS} accuracy and beat one head of d_k = 32 by ≥ {BEATS} on every seed; "
    f"nuanced if they reach {WORKS} but do not beat it on any seed; refuted if they are worse by > "
    f"{BEATS} on every seed; otherwise inconclusive.",
)
def _c47(ms: dict[str, Metric]) -> Verdict:
    div = ms["head_diversity_h8"]
    same = all(v < 0.2 for v in div.values)
    nums_en = (
        f"Ordered-pair task (64 classes, chance {ms['chance'].fmt()}), one layer, D = 32: accuracy "
        f"{ms['acc_h1'].fmt()} with 1 head of d_k = 32, {ms['acc_h2'].fmt()} with 2 heads of 16, "
        f"{ms['acc_h8'].fmt()} with 8 heads of 4. Of the 8 small heads, {ms['heads_on_offset1_h8'].fmt()} "
        f"attend most to the previous token and {ms['heads_on_offset2_h8'].fmt()} to the one before; the heads' "
        f"patterns differ by {div.fmt()} (total variation; 0 = identical)"
        + (" — they all learnt nearly the same pattern." if same else ".")
    )
    nums_zh = (
        f"有序对任务（64 类，随机 {ms['chance'].fmt()}），单层，D = 32：1 个 d_k=32 的头准确率 "
        f"{ms['acc_h1'].fmt()}，2 个 16 维的头 {ms['acc_h2'].fmt()}，8 个 4 维的头 {ms['acc_h8'].fmt()}。8 "
        f"个小头中 {ms['heads_on_offset1_h8'].fmt()} 个最关注前一个 token，{ms['heads_on_offset2_h8'].fmt()} "
        f"个最关注再前一个；各头注意力模式的差异为 {div.fmt()}（总变差，0 表示完全相同）"
        + ("——它们学到的几乎是同一个模式。" if same else "。")
    )
    rows = per_seed(ms, "acc_h1", "acc_h8")
    works = [a8 >= WORKS for _, a8 in rows]
    beats = [a8 >= a1 + BEATS for a1, a8 in rows]
    worse = [a8 < a1 - BEATS for a1, a8 in rows]
    return decide(
        nums_en,
        nums_zh,
        ("supported", all(works) and all(beats), "", ""),
        (
            "nuanced",
            all(works) and not any(beats),
            " Heads of 4 dimensions do work, but one full-size head did as well: on this task the split into "
            "parallel subspaces is not where the power comes from.",
            "4 维的头确实能工作，但一个全尺寸的头做得一样好：在这个任务上，力量并非来自并行子空间的拆分。",
        ),
        (
            "refuted",
            all(worse),
            " The small heads did clearly worse than one big head: head size matters here.",
            "小头明显不如一个大头：这里头的大小是有影响的。",
        ),
    )


# --- C49 ------------------------------------------------------------------------------------------------------


@experiment("padding-pe")
def padding_pe(trial: Trial) -> dict[str, float]:
    dev = trial.device
    torch.manual_seed(trial.seed)
    cfg: dict[str, Any] = dict(
        vocab_size=32, d_model=32, n_heads=4, n_layers=2, max_seq_len=32, positional="sinusoidal"
    )
    lm = build(ModelConfig(architecture="decoder_lm", **cfg), dev).double().eval()
    torch.manual_seed(trial.seed)
    enc = build(ModelConfig(architecture="encoder", **cfg), dev).double().eval()
    g = torch.Generator().manual_seed(trial.seed)
    n, pad = 7, 5
    with cpu_draws():  # the token draws, on the CPU's generator; the padded batches are made on the device
        seq = torch.randint(1, 32, (1, n), generator=g).to(dev)
        other = torch.randint(1, 32, (1, n + pad), generator=g).to(dev)

    def rel(a: torch.Tensor, b: torch.Tensor) -> float:
        return float(((a - b).abs().max() / a.abs().max()).item())

    with torch.no_grad():
        alone = lm(input_ids=seq).logits[0]
        right = torch.cat([torch.cat([seq, torch.zeros(1, pad, dtype=torch.long, device=dev)], 1), other])
        right_mask = torch.ones_like(right)
        right_mask[0, n:] = 0
        right_junk = right.clone()
        right_junk[0, n:] = on(dev, lambda: torch.randint(1, 32, (pad,), generator=g))  # other pad contents
        left = torch.cat([torch.cat([torch.zeros(1, pad, dtype=torch.long, device=dev), seq], 1), other])
        left_mask = torch.ones_like(left)
        left_mask[0, :pad] = 0
        out = {
            "right_pad_diff": rel(alone, lm(input_ids=right, attention_mask=right_mask).logits[0, :n]),
            "pad_content_diff": rel(alone, lm(input_ids=right_junk, attention_mask=right_mask).logits[0, :n]),
            "left_pad_diff": rel(alone, lm(input_ids=left, attention_mask=left_mask).logits[0, pad:]),
            "left_pad_naive_positions_diff": rel(
                alone,
                lm(
                    input_ids=left,
                    attention_mask=left_mask,
                    position_ids=torch.arange(n + pad, device=dev)[None].expand(2, -1),
                ).logits[0, pad:],
            ),
        }
        e_alone = enc(seq).last_hidden_state[0]
        e_junk = enc(right_junk, attention_mask=right_mask).last_hidden_state[0, :n]
        out["encoder_pad_diff"] = rel(e_alone, e_junk)
    return finite_metrics(out)


@claim(
    "C49-pe-on-padding-harmless",
    experiment="padding-pe",
    metrics=(
        "right_pad_diff",
        "pad_content_diff",
        "left_pad_diff",
        "encoder_pad_diff",
        "left_pad_naive_positions_diff",
    ),
    rule_text="Untrained models in float64, padding passed as attention_mask. Supported if the real tokens' outputs "
    f"are unchanged (< {num(UNCHANGED)} relative) by padding on either side, by other pad contents and in "
    f"the encoder, on every seed; refuted if they change by > {num(CHANGED)} on every seed; otherwise "
    "inconclusive.",
)
def _c49(ms: dict[str, Metric]) -> Verdict:
    names = ("right_pad_diff", "pad_content_diff", "left_pad_diff", "encoder_pad_diff")
    worst = [max(v) for v in per_seed(ms, *names)]
    en = (
        "With the padding masked as keys, the positional vectors (and the contents) of pad positions never reach a "
        f"real token: real-token outputs change by {fmt_values(worst)} (float64; right padding, other pad contents, "
        "left padding, bidirectional encoder). The real hazard is elsewhere: with left padding and positions counted "
        "from 0 instead of from the mask, the real tokens' own positions shift and their outputs change by "
        f"{ms['left_pad_naive_positions_diff'].fmt()}."
    )
    zh = (
        "只要 padding 作为 key 被 mask 掉，padding 位置上的位置编码（以及内容）就不会影响任何真实 token：真实 token "
        f"的输出变化 {fmt_values(worst)}（float64；右 padding、改变 pad 内容、左 "
        "padding、双向编码器）。真正的风险在别处：左 padding 时若位置从 0 数起而不是按 mask 计算，真实 token "
        f"自己的位置会整体偏移，输出变化 {ms['left_pad_naive_positions_diff'].fmt()}。"
    )
    if all(w < UNCHANGED for w in worst):
        return Verdict(
            "supported",
            en + f" Below {num(UNCHANGED)} on every seed: unchanged.",
            zh + f"每个种子上都低于 {num(UNCHANGED)}：没有变化。",
        )
    if all(w > CHANGED for w in worst):
        return Verdict(
            "refuted",
            en + f" Above {num(CHANGED)} on every seed: the padding does reach real tokens.",
            zh + f"每个种子上都高于 {num(CHANGED)}：padding 确实影响了真实 token。",
        )
    return Verdict(
        "inconclusive",
        en + f" Between {num(UNCHANGED)} and {num(CHANGED)}, or the seeds disagree.",
        zh + f"介于 {num(UNCHANGED)} 与 {num(CHANGED)} 之间，或各种子不一致。",
    )
