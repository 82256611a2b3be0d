"""§3: positional encoding in trained models (claims C21, C22, C27, C29–C31).

``pe-lm``                one small causal LM per positional scheme (none, sinusoidal, learned, RoPE, ALiBi, T5,
                         Shaw, and sinusoidal *concatenated* instead of added), trained at length T on a text-like
                         Markov task whose next token depends on the token two places back, then evaluated at 4T:
                         loss per position inside and beyond the training length (C29–C31), add vs concat (C22),
                         what the trained attention scores depend on (C27), what a model without PE can and cannot
                         see (C21).

The exact algebra of the sinusoidal table and of RoPE (C23–C26, C28, C32) is in ``sinusoidal``.
"""

from __future__ import annotations

import torch

from anatomy import ModelConfig, build_model
from anatomy.components.positional import sinusoidal_table
from anatomy.components.positional.base import PositionalScheme
from anatomy.experiments.figures import figure
from anatomy.experiments.fitting import budget, finite_metrics, fit
from anatomy.experiments.probes import loss_per_position
from anatomy.experiments.registry import Verdict, claim, experiment
from anatomy.experiments.rules import count_seeds, fmt_count, fmt_values, num, per_seed
from anatomy.experiments.tasks import MarkovTask
from anatomy.inspection import capture

PE_KINDS = ("none", "sinusoidal", "learned", "rope", "alibi", "t5", "shaw")
COLORS = {"none": "0.5", "sinusoidal": "tab:blue", "learned": "tab:orange", "rope": "tab:green",
          "alibi": "tab:red", "t5": "tab:purple", "shaw": "tab:brown", "concat": "tab:cyan"}
TOL_LOSS = 0.05  # nats: "about the same loss"
EXACT = 1e-9  # C21, C27: float64 relative error below this is exact (order-blind, a fixed rotation)
MOVED = 1e-6  # C21: a change of the last logits above this: the causal decoder sees the order
GAIN = 0.2  # C21: share of the learnable gain recovered without PE that shows the causal mask leaks order
OFFSET_R2 = 0.9  # C27: R² of the layer-0 scores explained by the offset alone that counts as "relative"
EXTRAPOLATES, FAILS = 0.1, 0.5  # C29, C30: share of the learnt gain lost past T: extrapolates / does not


class ConcatSinusoidal(PositionalScheme):
    """The alternative the post sets aside (§3.1): *concatenate* a position vector instead of adding it.

    The last ``d_pos`` features of the embedding are replaced by a sinusoidal table of width ``d_pos``: at the same
    model width the token keeps ``D - d_pos`` features. (Keeping all D token features means a wider model, whose
    cost the experiment counts.)"""

    site = "embedding"

    def __init__(self, d_model: int, d_pos: int) -> None:
        super().__init__()
        if d_pos % 2 or not 0 < d_pos < d_model:
            raise ValueError(f"d_pos must be even and in (0, d_model={d_model}), got {d_pos}")
        self.d_model, self.d_pos = d_model, d_pos

    def add_to_embeddings(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        table = sinusoidal_table(positions, self.d_pos).to(x.dtype)  # (B|1, T, d_pos)
        table = table.expand(x.shape[0], -1, -1)
        return torch.cat([x[..., : self.d_model - self.d_pos], table], dim=-1)  # (B, T, D)


def _n_params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def _rel_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).abs().max() / a.abs().max().clamp_min(1e-30)).item()


def _offset_r2(model: torch.nn.Module, vocab: int, length: int) -> float:
    """How much of layer 0's attention scores is a function of the offset i - j alone.

    Every row of the input repeats one token, so the scores can only vary with the positions; R² of the scores
    (j <= i) explained by their offset, averaged over tokens and heads. 1.0: the scores see only relative
    position (RoPE, ALiBi by construction); lower: absolute position leaks in."""
    ids = torch.arange(vocab)[:, None].expand(vocab, length).contiguous()  # (V, T)
    model.eval()
    with torch.no_grad(), capture(model, "stack.blocks.0.attn.hook_scores") as cache:
        model(input_ids=ids)
    scores = next(iter(cache.values())).double()  # (V, H, T, T)
    i, j = torch.tril_indices(length, length)
    vals = scores[:, :, i, j]  # (V, H, N)
    onehot = torch.nn.functional.one_hot(i - j, length).double()  # (N, T) offset groups
    means = (vals @ onehot) / onehot.sum(0).clamp_min(1)  # (V, H, T)
    fitted = means[..., i - j]
    ss_res = (vals - fitted).pow(2).sum(-1)
    ss_tot = (vals - vals.mean(-1, keepdim=True)).pow(2).sum(-1)
    keep = ss_tot > 1e-12 * vals.pow(2).sum(-1).clamp_min(1e-30)
    if not bool(keep.any()):
        return 1.0
    return (1 - ss_res[keep] / ss_tot[keep]).mean().item()


def _order_blindness(seed: int) -> dict[str, float]:
    """Exact checks (float64, untrained models): does self-attention without PE see word order?"""
    torch.manual_seed(seed)
    base = dict(vocab_size=16, d_model=32, n_heads=4, n_layers=2, dropout=0.0)
    enc = build_model(ModelConfig(architecture="encoder", positional="none", **base)).double().eval()
    torch.manual_seed(seed)
    enc_pe = build_model(ModelConfig(architecture="encoder", positional="sinusoidal", **base)).double().eval()
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, 16, (4, 12), generator=g)
    perm = torch.randperm(12, generator=g)
    wo_da_ni, ni_da_wo = torch.tensor([[1, 2, 3]]), torch.tensor([[3, 2, 1]])  # 我 打 你 / 你 打 我
    with torch.no_grad():
        h = enc(ids).last_hidden_state
        equivariance = _rel_diff(h[:, perm], enc(ids[:, perm]).last_hidden_state)
        # each word's vector in one sentence against the same word's vector in the other
        a, b = enc(wo_da_ni).last_hidden_state, enc(ni_da_wo).last_hidden_state.flip(1)
        a_pe, b_pe = enc_pe(wo_da_ni).last_hidden_state, enc_pe(ni_da_wo).last_hidden_state.flip(1)
        torch.manual_seed(seed)
        dec = build_model(ModelConfig(architecture="decoder_lm", positional="none", **base)).double().eval()
        x = torch.randint(1, 16, (1, 8), generator=g)
        swapped = x.clone()
        swapped[0, :3] = x[0, :3].flip(0)  # same tokens, same last token, prefix order changed
        causal = _rel_diff(dec(input_ids=x).logits[0, -1], dec(input_ids=swapped).logits[0, -1])
    return {"nope_equivariance_err": equivariance, "wo_da_ni_diff_nope": _rel_diff(a, b),
            "wo_da_ni_diff_sinusoidal": _rel_diff(a_pe, b_pe), "causal_nope_order_diff": causal}


def _rotation_checks(d: int = 64, n: int = 256) -> dict[str, float]:
    """PE(p + k) = R_k PE(p) with a fixed block rotation R_k; PE(p)·PE(p + k) depends on k only (float64)."""
    pos = torch.arange(n + 64, dtype=torch.float64)
    pe = sinusoidal_table(pos, d, dtype=torch.float64)  # (N, D): sin on even, cos on odd dims
    w = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    worst, spread = 0.0, 0.0
    for k in (1, 5, 17, 63):
        c, s = torch.cos(k * w), torch.sin(k * w)
        sin_p, cos_p = pe[:n, 0::2], pe[:n, 1::2]
        rotated = torch.stack([sin_p * c + cos_p * s, cos_p * c - sin_p * s], dim=-1).flatten(-2)  # R_k PE(p)
        worst = max(worst, (rotated - pe[k: n + k]).abs().max().item())
        dots = (pe[:n] * pe[k: n + k]).sum(-1)
        spread = max(spread, (dots.std() / dots.abs().mean()).item())
    return {"rotation_residual": worst, "dot_shift_spread": spread}


@experiment("pe-lm", units={"train_length": " tokens"})
def pe_lm(ctx):
    T = budget(ctx.preset, 16, 32, 64)
    steps = budget(ctx.preset, 40, 200, 1000)
    batch, d_model = 16, budget(ctx.preset, 32, 32, 64)
    task = MarkovTask(vocab=16, lags=(2,), p=0.9, seed=ctx.seed)
    g = torch.Generator().manual_seed(ctx.seed)
    train = task.sample(steps * batch, T, g)
    held = task.batch(task.sample(budget(ctx.preset, 16, 64, 128), 4 * T, g))

    def batches(step):
        return task.batch(train[step * batch:(step + 1) * batch])

    base = dict(vocab_size=task.vocab, d_model=d_model, n_heads=4, n_layers=2, max_seq_len=4 * T, dropout=0.0,
                init="xavier", scale_embeddings=True)  # the 2017 recipe: embeddings ~ N(0, 1/D) times sqrt(D)
    out: dict[str, float] = {"train_length": T, "train_steps": steps, "floor": task.floor, "uniform": task.uniform}
    curves, models = {}, {}
    for kind in (*PE_KINDS, "concat"):
        torch.manual_seed(ctx.seed)  # same initial weights wherever the architectures agree
        model = build_model(ModelConfig(positional="none" if kind == "concat" else kind, **base))
        if kind == "concat":
            model.embeddings.positional = ConcatSinusoidal(d_model, d_model // 2)
        losses = fit(model, batches, steps, lr=6e-3, warmup=20)
        lp = loss_per_position(model, held)  # (4T - 1,)
        curves[kind] = lp
        models[kind] = model
        inside, past = lp[: T - 1].nanmean().item(), lp[T:].nanmean().item()
        out[f"in_{kind}"], out[f"past_{kind}"] = inside, past
        out[f"deg_{kind}"] = (past - inside) / max(task.uniform - inside, 1e-6)
        out[f"train_final_{kind}"] = losses[-1]

    # C30: a learned table of T rows, asked for position T
    torch.manual_seed(ctx.seed)
    short = build_model(ModelConfig(**{**base, "positional": "learned", "max_seq_len": T}))
    try:
        short(input_ids=torch.zeros(1, T + 1, dtype=torch.long))
        out["learned_raises_past_table"] = 0.0
    except ValueError:
        out["learned_raises_past_table"] = 1.0

    # C22: what concatenating costs if the token keeps all D features (a model of width 2D)
    wide = build_model(ModelConfig(**{**base, "d_model": 2 * d_model, "positional": "none"}))
    out["concat_params_ratio"] = (_n_params(wide) - task.vocab * d_model) / _n_params(models["sinusoidal"])

    # C21, C27
    out.update(_order_blindness(ctx.seed))
    out["nope_gain"] = (task.uniform - out["in_none"]) / (task.uniform - task.floor)
    out.update(_rotation_checks())
    for kind in ("sinusoidal", "learned", "rope", "alibi"):
        out[f"offset_r2_{kind}"] = _offset_r2(models[kind], task.vocab, T)

    _draw_pe_lm(ctx, curves, task, T, out, models)
    return finite_metrics(out)


def _draw_pe_lm(ctx, curves, task, T, out, models):
    path = ctx.figure_path("C29-loss-by-position")
    if path is not None:
        def draw(axes):
            ax, bars = axes
            w = max(1, T // 8)
            for kind, lp in curves.items():
                y = lp.numpy()
                smooth = torch.tensor(y).unfold(0, w, 1).nanmean(-1).numpy() if w > 1 else y
                x = torch.arange(len(smooth)) + (w - 1) / 2
                ax.plot(x.numpy(), smooth, color=COLORS[kind], lw=1.6 if kind in ("sinusoidal", "learned", "rope",
                                                                                  "alibi") else 1.0,
                        ls="--" if kind == "concat" else "-", label=kind)
            ax.axvline(T - 1, color="k", ls="--", lw=1)
            ax.text(T - 1, 0.12, "← seen in training | never seen → ", fontsize=8, ha="center",
                    bbox=dict(facecolor="white", edgecolor="none", alpha=0.8))
            ax.axhline(task.floor, color="k", ls=":", lw=1)
            ax.axhline(task.uniform, color="0.4", ls="-.", lw=1)
            ax.text(4 * T - 2, task.floor - 0.05, "best possible", fontsize=8, ha="right", va="top")
            ax.text(4 * T - 2, task.uniform - 0.05, "uniform guess (ln V)", fontsize=8, ha="right", va="top")
            ax.set(xlabel="position in the sequence", ylabel="next-token loss (nats)", ylim=(0, task.uniform * 1.6),
                   title=f"Loss by position: trained on length {T}, tested on length {4 * T}")
            ax.legend(fontsize=7, ncol=2, loc="upper left")
            kinds = list(curves)
            xs = torch.arange(len(kinds)).numpy()
            bars.bar(xs - 0.2, [out[f"in_{k}"] for k in kinds], 0.4, label=f"positions < {T}", color="tab:gray")
            bars.bar(xs + 0.2, [min(out[f"past_{k}"], task.uniform * 1.6) for k in kinds], 0.4,
                     label=f"positions ≥ {T} (never trained)", color="tab:red")
            bars.axhline(task.floor, color="k", ls=":", lw=1)
            bars.axhline(task.uniform, color="0.4", ls="-.", lw=1)
            bars.set_xticks(xs, kinds, rotation=30)
            bars.set(ylabel="mean loss (nats)", title="Inside vs beyond the training length")
            bars.legend(fontsize=8)
        figure(path, draw, grid=(1, 2), size=(12, 4.5))

    path = ctx.figure_path("C27-scores-by-offset")
    if path is not None:
        ids = torch.full((1, T), 3, dtype=torch.long)
        mats = {}
        for kind in ("sinusoidal", "learned", "rope", "alibi"):
            with torch.no_grad(), capture(models[kind], "stack.blocks.0.attn.hook_scores") as cache:
                models[kind](input_ids=ids)
            s = next(iter(cache.values()))[0, 0].clone()
            s[torch.triu(torch.ones(T, T, dtype=torch.bool), 1)] = float("nan")
            mats[kind] = s

        def draw_mats(axes):
            for ax, (kind, s) in zip(axes, mats.items()):
                ax.imshow(s.numpy(), cmap="viridis")
                ax.set(title=f"{kind}: R²(offset) = {out[f'offset_r2_{kind}']:.2f}", xlabel="key position j",
                       ylabel="query position i")
            axes[0].figure.suptitle("Trained layer-0 attention scores (head 0) for a sequence repeating one token: "
                                    "constant along each diagonal = they depend only on the offset i − j", fontsize=10)
        figure(path, draw_mats, grid=(1, 4), size=(14, 4.1))


# --- C21 ------------------------------------------------------------------------------------------------------

def _c21(ms):
    eq, pair, pair_pe = ms["nope_equivariance_err"], ms["wo_da_ni_diff_nope"], ms["wo_da_ni_diff_sinusoidal"]
    causal, gain = ms["causal_nope_order_diff"], ms["nope_gain"]
    blind, n = count_seeds(ms, ("nope_equivariance_err", "wo_da_ni_diff_nope"), lambda e, p: e < EXACT and p < EXACT)
    if blind == 0:
        return Verdict("refuted", f"Self-attention without positions is not order-blind here: permuting the input "
                       f"changes the output by {eq.fmt()} (relative).",
                       f"没有位置编码时自注意力并非对词序不敏感：打乱输入后输出相对变化 {eq.fmt()}。")
    if blind < n:
        return Verdict("inconclusive", f"Order-blindness held on {blind} of {n} seeds.",
                       f"只有 {blind}/{n} 个随机种子上满足词序不变性。")
    leak, _ = count_seeds(ms, ("causal_nope_order_diff", "nope_gain"), lambda c, gn: c > MOVED and gn > GAIN)
    head_en = (f"Without a causal mask the post is exactly right: permuting the tokens only permutes the outputs "
               f"(error {eq.fmt()}), and 我打你 / 你打我 give each word the same vector ({pair.fmt()}; with "
               f"sinusoidal PE {pair_pe.fmt()}).")
    head_zh = (f"没有因果 mask 时原文完全正确：打乱 token 只会打乱输出（误差 {eq.fmt()}），“我打你”与“你打我”中每个词的"
               "向量相同"
               f"（{pair.fmt()}；加正弦位置编码后为 {pair_pe.fmt()}）。")
    if leak == n:
        return Verdict("nuanced", head_en + f" But a causal decoder without PE is not blind: reordering the prefix "
                       f"changes the last logits by {causal.fmt()}, and trained without any PE it recovered "
                       f"{gain.fmt()} of the learnable gain on a task that needs the token two places back — the "
                       "mask itself leaks order.",
                       head_zh + "但不带位置编码的因果解码器并不“看不见”顺序：改变前缀顺序后最后一个位置的 logits 变化"
                                 " "
                       f"{causal.fmt()}；在需要“前两个位置的 token”的任务上，完全不加位置编码训练仍获得了可学习收益的 "
                       f"{gain.fmt()}——因果 mask 本身泄露了顺序。")
    if leak == 0:
        return Verdict("supported", head_en + f" Even the causal model without PE stayed near chance on the "
                       f"order task (gain {gain.fmt()}).",
                       head_zh + f"即使是不加位置编码的因果模型，在顺序任务上也接近随机（收益 {gain.fmt()}）。")
    return Verdict("inconclusive", head_en + f" Whether the causal mask leaks order differs between seeds ({leak}/{n})"
                                             ".",
                   head_zh + f"因果 mask 是否泄露顺序在不同种子上不一致（{leak}/{n}）。")


claim("C21-attention-order-blind", section="§3.1",
      zh="把“我打你”和“你打我”分别输入模型如果把词序打乱注意力分数会变得一模一样…这意味着词序信息对Attention来说完全是"
         "不可见的",
      en="Without positional encoding, self-attention is blind to word order: 我打你 and 你打我 look identical.",
      experiment="pe-lm",
      metrics=("nope_equivariance_err", "wo_da_ni_diff_nope", "wo_da_ni_diff_sinusoidal", "causal_nope_order_diff",
               "nope_gain"),
      rule=_c21,
      rule_text="Exact float64 tests on untrained models plus a trained causal LM without PE. Refuted if a "
                f"bidirectional encoder without PE is not permutation-equivariant (relative error ≥ {num(EXACT)}); "
                "supported if it is and a causal decoder without PE is order-blind too (prefix reordering changes "
                f"nothing and training recovers < {GAIN:.0%} of the learnable gain on the lag-2 task); nuanced if the "
                f"encoder is blind but the causal decoder is not (reordering changes its logits by > {num(MOVED)} and "
                f"it recovers > {GAIN:.0%} of the gain); otherwise inconclusive.")


# --- C22 ------------------------------------------------------------------------------------------------------

def _c22(ms):
    rows = per_seed(ms, "in_sinusoidal", "in_concat")
    diffs = [a - c for a, c in rows]
    ratio = ms["concat_params_ratio"]
    d = fmt_values(diffs, " nats")
    if all(x <= TOL_LOSS for x in diffs):
        return Verdict("supported", f"At the same width and after {fmt_count(ms['train_steps'])} steps, adding the "
                       f"position reached {ms['in_sinusoidal'].fmt()} "
                       f"vs {ms['in_concat'].fmt()} for concatenation (add − concat = {d}); concatenating while "
                       f"keeping every token feature means a model with {ratio.fmt()}× the parameters.",
                       f"同样宽度下，相加得到 {ms['in_sinusoidal'].fmt()}，拼接得到 {ms['in_concat'].fmt()}"
                       f"（相加 − 拼接 = {d}）；若拼接时保留全部词向量维度，参数量是 {ratio.fmt()} 倍。")
    if all(x > TOL_LOSS for x in diffs):
        return Verdict("refuted", f"After {fmt_count(ms['train_steps'])} steps, adding was worse than concatenating "
                       f"at the same width by {d} "
                       f"({ms['in_sinusoidal'].fmt()} vs {ms['in_concat'].fmt()}), although concatenation left the "
                       f"token only half of the features (keeping all of them would cost {ratio.fmt()}× the "
                       f"parameters).",
                       f"训练 {fmt_count(ms['train_steps'])} 步后，同样宽度下相加比拼接差 {d}（"
                       f"{ms['in_sinusoidal'].fmt()} 对 {ms['in_concat'].fmt()}），尽管拼接只给词向量留了一半维度"
                       f"（保留全部维度的参数量是 {ratio.fmt()} 倍）。")
    return Verdict("inconclusive", f"Add − concat = {d}: the seeds disagree about a {TOL_LOSS} nat margin.",
                   f"相加 − 拼接 = {d}：各种子在 {TOL_LOSS} nat 的容差上不一致。")


claim("C22-add-not-concat", section="§3.1",
      zh="Concatenate会显著增加维度训练开销变大…Transformer采用的是直接相加…后来实验也证明加法的表达力完全够用",
      en="Concatenating a position vector costs width; adding it is fully sufficient.",
      experiment="pe-lm", metrics=("in_sinusoidal", "in_concat", "concat_params_ratio", "train_steps"),
      rule=_c22,
      rule_text=f"Same LM and data, sinusoidal PE added vs concatenated into the last D/2 features (same width). "
                f"Supported if adding is no worse than concatenating by more than {TOL_LOSS} nats of loss inside the "
                f"training length on every seed; refuted if it is worse by more on every seed; otherwise "
                f"inconclusive. The cost side is the parameter ratio of a concat model that keeps all D token "
                f"features (width 2D).")


# --- C27 ------------------------------------------------------------------------------------------------------

def _c27(ms):
    rot, spread = ms["rotation_residual"], ms["dot_shift_spread"]
    r2, r2_rope = ms["offset_r2_sinusoidal"], ms["offset_r2_rope"]
    if max(rot.values) > EXACT or max(spread.values) > EXACT:
        return Verdict("refuted", f"PE(p+k) is not a fixed rotation of PE(p): residual {rot.fmt()} (above "
                       f"{num(EXACT)}).", f"PE(p+k) 并不是 PE(p) 的固定旋转：残差 {rot.fmt()}（超过 {num(EXACT)}）。")
    algebra_en = (f"The algebra holds exactly: R_k·PE(p) = PE(p+k) to {rot.fmt()}, and PE(p)·PE(p+k) depends "
                  f"on k alone (spread {spread.fmt()}).")
    algebra_zh = (f"代数部分严格成立：R_k·PE(p) 与 PE(p+k) 相差 {rot.fmt()}，PE(p)·PE(p+k) 只依赖 k（离散度 "
                  f"{spread.fmt()}）。")
    hits, n = count_seeds(ms, ("offset_r2_sinusoidal",), lambda v: v >= OFFSET_R2)
    if hits == n:
        return Verdict("supported", algebra_en + f" And the trained model's layer-0 scores are mostly a function of "
                       f"the offset (R² = {r2.fmt()}).",
                       algebra_zh + f"训练后第 0 层的注意力分数也主要由相对距离决定（R² = {r2.fmt()}）。")
    if hits == 0:
        return Verdict("nuanced", algebra_en + f" But attention does not get relative position for free: after the "
                       f"token is added, the LayerNorm and W_q, W_k of the trained model make layer-0 scores only "
                       f"partly a function of the offset (R² = {r2.fmt()}, vs {r2_rope.fmt()} for RoPE, which "
                       f"applies the rotation inside attention).",
                       algebra_zh + "但注意力并不能“免费”得到相对位置：与词向量相加、经过 LayerNorm 和 W_q、W_k 后，训"
                                    "练好的"
                       f"模型第 0 层分数只有一部分由相对距离解释（R² = {r2.fmt()}；RoPE 把旋转放进注意力内部，为 "
                       f"{r2_rope.fmt()}）。")
    return Verdict("inconclusive", algebra_en + f" Whether the trained scores follow the offset differs between seeds "
                   f"(R² = {r2.fmt()}).", algebra_zh + "训练后的分数是否只看相对距离在各种子间不一致（R² = "
                                                       f"{r2.fmt()}）。")


claim("C27-relative-by-rotation", section="§3.2",
      zh="PE(pos+k)可以表示为PE(pos)的某种线性组合…任何位置的编码向量都可以由任意另一个位置加上一个固定的“旋转矩阵”变换"
         "而来。"
         "模型不需要单独学习“相对位置k的值是多少”只需要学会这个线性变换就能隐式地获得相对位置信息",
      en="PE(pos+k) is a fixed rotation of PE(pos), so the model gets relative position implicitly.",
      experiment="pe-lm",
      metrics=("rotation_residual", "dot_shift_spread", "offset_r2_sinusoidal", "offset_r2_learned",
               "offset_r2_rope", "offset_r2_alibi"),
      rule=_c27,
      rule_text=f"Refuted if R_k·PE(p) ≠ PE(p+k) or PE(p)·PE(p+k) varies with p (float64, > {num(EXACT)}). "
                "Otherwise the 'relative position for free' half is judged on the trained sinusoidal LM: layer-0 "
                f"scores of a constant-token input, R² explained by the offset i−j alone; supported if ≥ {OFFSET_R2} "
                f"on every seed, nuanced if < {OFFSET_R2} on every seed, inconclusive if the seeds disagree.")


# --- C29, C30, C31 --------------------------------------------------------------------------------------------

def _c29(ms):
    deg, deg_a = ms["deg_sinusoidal"], ms["deg_alibi"]
    T = int(ms["train_length"].values[0])
    facts_en = (f"Trained at T={T}, the sinusoidal model's loss goes from {ms['in_sinusoidal'].fmt()} inside the "
                f"training length to {ms['past_sinusoidal'].fmt()} beyond it (uniform guessing: "
                f"{ms['uniform'].fmt()}); it loses {deg.fmt()} of what it had learnt (ALiBi, on the same task: "
                f"{deg_a.fmt()}).")
    facts_zh = (f"在 T={T} 上训练后，正弦编码模型的 loss 在训练长度内为 {ms['in_sinusoidal'].fmt()}，超出后为 "
                f"{ms['past_sinusoidal'].fmt()}（均匀猜测：{ms['uniform'].fmt()}）；学到的收益损失了 {deg.fmt()}"
                f"（同一任务上 ALiBi 为 {deg_a.fmt()}）。")
    works, n = count_seeds(ms, ("deg_sinusoidal",), lambda v: v < EXTRAPOLATES)
    fails, _ = count_seeds(ms, ("deg_sinusoidal", "deg_alibi"), lambda s, a: s > FAILS and a < EXTRAPOLATES)
    partial, _ = count_seeds(ms, ("deg_sinusoidal",), lambda v: EXTRAPOLATES <= v <= FAILS)
    if works == n:
        return Verdict("supported", facts_en, facts_zh)
    if fails == n:
        return Verdict("refuted", facts_en + " The table has values past T, but the model never learnt to use "
                       "them: a complete frequency range is not extrapolation.",
                       facts_zh + "正弦表在 T 之后确实有值，但模型从未学会使用这些值：频率范围完整并不等于能外推。")
    if partial == n:
        return Verdict("nuanced", facts_en + " It extrapolates only partly.", facts_zh + "只能部分外推。")
    return Verdict("inconclusive", facts_en + " The seeds disagree, or the task did not allow even ALiBi to "
                   "extrapolate.", facts_zh + "各种子结论不一致，或该任务上连 ALiBi 也无法外推。")


claim("C29-sinusoidal-extrapolation", section="§3.2–3.3",
      zh="它为什么有一定的外推能力——即使遇到比训练时更长的序列频率范围仍然是完整的；（表）正弦位置编码：理论上能外推到"
         "更长序列",
      en="Sinusoidal PE extrapolates to sequences longer than those seen in training.",
      experiment="pe-lm",
      metrics=("train_length", "in_sinusoidal", "past_sinusoidal", "deg_sinusoidal", "deg_alibi", "deg_rope",
               "deg_t5", "deg_shaw", "deg_none", "uniform", "floor"),
      rule=_c29,
      rule_text="deg = (loss beyond T − loss inside T) / (ln V − loss inside T): the share of the learnt gain lost "
                "past the training length (0: perfect extrapolation, ≥ 1: worse than guessing). Supported if the "
                f"sinusoidal deg < {EXTRAPOLATES} on every seed; refuted if > {FAILS} on every seed while ALiBi's < "
                f"{EXTRAPOLATES} (so the task can be extrapolated); nuanced if {EXTRAPOLATES}–{FAILS} on every seed; "
                "otherwise inconclusive.")


def _c30(ms):
    raises, deg = ms["learned_raises_past_table"], ms["deg_learned"]
    bad, n = count_seeds(ms, ("learned_raises_past_table", "deg_learned"), lambda r, d: r == 1 and d > FAILS)
    ok, _ = count_seeds(ms, ("learned_raises_past_table", "deg_learned"), lambda r, d: r == 1 and d <= FAILS)
    en = (f"A table of T rows has no row T (the model refuses position T: {fmt_count(raises)}); with a table "
          f"4× longer, the rows past T stay at their random initial values and the loss goes from "
          f"{ms['in_learned'].fmt()} to {ms['past_learned'].fmt()} (deg {deg.fmt()}).")
    zh = (f"T 行的表没有第 T 行（位置 T 被拒绝：{fmt_count(raises)}）；把表加长到 4 倍，T 之后的行仍停留在随机初始值，"
          "loss "
          "从 "
          f"{ms['in_learned'].fmt()} 变为 {ms['past_learned'].fmt()}（deg {deg.fmt()}）。")
    if bad == n:
        return Verdict("supported", en, zh)
    if ok == n:
        return Verdict("nuanced", en + f" The untrained rows did not hurt much here (deg ≤ {FAILS}).",
                       zh + f"这里未训练的行影响不大（deg ≤ {FAILS}）。")
    if max(raises.values) == 0:
        return Verdict("refuted", en, zh)
    return Verdict("inconclusive", en, zh)


claim("C30-learned-no-extrapolation", section="§3.3",
      zh="可学习位置编码：需要预设最大长度超出部分没有参数无外推能力",
      en="Learned positional embeddings need a preset maximum length and cannot extrapolate past it.",
      experiment="pe-lm", metrics=("learned_raises_past_table", "in_learned", "past_learned", "deg_learned"),
      rule=_c30,
      rule_text="Supported if a learned table of T rows refuses position T and a model trained at T with a 4T "
                f"table loses > {FAILS:.0%} of its gain past T (deg > {FAILS}) on every seed; nuanced if it refuses "
                f"but deg ≤ {FAILS} on every seed; "
                "refuted if it does not refuse; otherwise inconclusive.")


def _c31(ms):
    diffs = [s - ln for s, ln in per_seed(ms, "in_sinusoidal", "in_learned")]
    d = fmt_values(diffs, " nats")
    en = (f"Inside the training length, after {fmt_count(ms['train_steps'])} steps: sinusoidal "
          f"{ms['in_sinusoidal'].fmt()}, learned {ms['in_learned'].fmt()} "
          f"(difference {d}; best possible {ms['floor'].fmt()}).")
    zh = (f"训练 {fmt_count(ms['train_steps'])} 步后，训练长度内：正弦 {ms['in_sinusoidal'].fmt()}，可学习 "
          f"{ms['in_learned'].fmt()}（差 {d}；理论最优 "
          f"{ms['floor'].fmt()}）。")
    if all(abs(x) <= TOL_LOSS for x in diffs):
        return Verdict("supported", en, zh)
    if all(x > TOL_LOSS for x in diffs) or all(x < -TOL_LOSS for x in diffs):
        better = "learned" if diffs[0] > 0 else "sinusoidal"
        return Verdict("refuted", en + f" The {better} table is consistently better by more than {TOL_LOSS} nats.",
                       zh + f"{'可学习' if better == 'learned' else '正弦'}编码稳定地好出 {TOL_LOSS} nat 以上。")
    return Verdict("inconclusive", en + " The seeds disagree about the sign or size of the gap.",
                   zh + "各种子对差距的方向或大小不一致。")


claim("C31-sinusoidal-vs-learned", section="§3.3",
      zh="我在自己的小型任务上比较过正则可学习位置编码发现效果几乎相当",
      en="Sinusoidal and learned positional encodings perform about the same in-distribution.",
      experiment="pe-lm", metrics=("in_sinusoidal", "in_learned", "floor", "train_steps"),
      rule=_c31,
      rule_text=f"Supported if |loss(sinusoidal) − loss(learned)| ≤ {TOL_LOSS} nats inside the training length on "
                f"every seed; refuted if one is better by more than that on every seed; otherwise inconclusive.")


# --- the algebra experiment --------------------------------------------------------------------------------------
