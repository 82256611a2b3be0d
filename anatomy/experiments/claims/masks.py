"""§2.4: masks and fill values (claims C17–C20).

``mask-fills``           every fill value × dtype, masking after softmax, the causal mask's exactness, and two LMs
                         trained with -inf and -1e9 from the same seed.
"""

from __future__ import annotations

import torch

from anatomy import pitfalls
from anatomy.experiments.figures import figure
from anatomy.experiments.fitting import budget, fit, tiny_model
from anatomy.experiments.registry import Verdict, claim, experiment
from anatomy.experiments.rules import Case, Ladder, num, seed_verdict
from anatomy.experiments.tasks import LM_T, char_corpus, lm_batch
from anatomy.inspection import capture

# =============================================================================================================
# mask-fills: C17–C20
# =============================================================================================================

FILLS = ("-inf", "-1e9", "-1e4", "finfo.min", "zero after softmax")
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def _fill_grid(g: torch.Generator) -> dict:
    """For every fill × dtype: masked_fill then softmax *in that dtype*. ``leak``: largest probability on a hidden
    key in rows that see ≥ 1 key; ``sum``: mean row sum there; ``full``: what a row that sees no key gets
    ('NaN', 'uniform', 'zeros'); ``error``: the message if masked_fill refused the value."""
    rows, keys = 64, 16
    scores = 4 * torch.randn(rows, keys, generator=g)  # (R, S) realistic logits
    mask = torch.rand(rows, keys, generator=g) < 0.6  # True = may attend
    mask[:, 0] = True  # every ordinary row sees at least one key
    mask[-1] = False  # the last row sees nothing (an all-padding sequence, a left pad under a causal mask)
    ordinary = slice(0, rows - 1)
    grid = {}
    for fill in FILLS:
        for dname, dtype in DTYPES.items():
            s = scores.to(dtype)
            cell = {"error": ""}
            if fill == "zero after softmax":
                p = (s.softmax(-1) * mask).float()
            else:
                value = {"-inf": float("-inf"), "-1e9": -1e9, "-1e4": -1e4,
                         "finfo.min": torch.finfo(dtype).min}[fill]
                try:
                    p = s.masked_fill(~mask, value).softmax(-1).float()
                except RuntimeError as err:
                    grid[(fill, dname)] = {"error": str(err).split(" without")[0], "leak": float("nan"),
                                           "sum": float("nan"), "full": "error", "pad_mass": float("nan")}
                    continue
            hidden = p[ordinary].masked_fill(mask[ordinary], 0.0)
            cell["leak"] = hidden.max().item()
            cell["sum"] = p[ordinary].sum(-1).mean().item()
            last = p[-1]
            cell["pad_mass"] = last.sum().item()
            cell["full"] = ("NaN" if torch.isnan(last).any() else "zeros" if last.abs().max() == 0
                            else "uniform" if (last - 1 / keys).abs().max() < 1e-2 else "other")
            grid[(fill, dname)] = cell
    return grid


def _mask_gradients() -> dict:
    """float64: mask before softmax vs zeroing after softmax, without and with renormalising the row."""
    g = torch.Generator().manual_seed(11)
    r, n, dv = 32, 12, 8
    s0 = torch.randn(r, n, generator=g, dtype=torch.float64) * 2
    mask = torch.rand(r, n, generator=g) < 0.5
    mask[:, 0] = True
    v = torch.randn(n, dv, generator=g, dtype=torch.float64)
    upstream = torch.randn(r, dv, generator=g, dtype=torch.float64)

    def run(kind):
        s = s0.clone().requires_grad_(True)
        if kind == "before":
            p = s.masked_fill(~mask, float("-inf")).softmax(-1)
        else:
            p = s.softmax(-1) * mask
            if kind == "renorm":
                p = p / p.sum(-1, keepdim=True)
        out = p @ v
        (out * upstream).sum().backward()
        return out.detach(), s.grad, p.detach()

    ref, g_ref, _ = run("before")
    res = {}
    for kind in ("after", "renorm"):
        o, gr, p = run(kind)
        res[f"{kind}_fwd"] = (o - ref).abs().max().item()
        res[f"{kind}_grad_visible"] = (gr - g_ref).masked_fill(~mask, 0).abs().max().item()
        res[f"{kind}_grad_hidden"] = gr.masked_fill(mask, 0).abs().max().item()
        res[f"{kind}_rowsum"] = p.sum(-1).mean().item()
    return res


def _greedy(model, prompts: torch.Tensor, new: int) -> torch.Tensor:
    """Greedy decoding by full recomputation (so the causal mask and its fill are used at every step)."""
    ids = prompts
    with torch.no_grad():
        for _ in range(new):
            nxt = model(input_ids=ids).logits[:, -1].argmax(-1, keepdim=True)
            ids = torch.cat([ids, nxt], dim=1)
    return ids[:, prompts.shape[1]:]


def _left_padded(data: torch.Tensor, g: torch.Generator, t: int = 16):
    lengths = [t, t - 3, t - 7, t - 12]
    ids = torch.zeros(len(lengths), t, dtype=torch.long)
    mask = torch.zeros(len(lengths), t, dtype=torch.long)
    alone = []
    for i, n in enumerate(lengths):
        s = int(torch.randint(0, len(data) - n, (1,), generator=g))
        ids[i, t - n:], mask[i, t - n:] = data[s:s + n], 1
        alone.append(data[s:s + n][None])
    return ids, mask, alone


def _leftpad_stats(model, ids, mask, alone) -> tuple[float, float]:
    """(share of real-token logits that are NaN, largest |difference| of real-token logits vs each row alone)."""
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask).logits  # (B, T, V)
        real = logits[mask.bool()]
        nan = torch.isnan(real).float().mean().item()
        diff = max((logits[i, -a.shape[1]:] - model(input_ids=a).logits[0]).abs().max().item()
                   for i, a in enumerate(alone))
    return nan, diff


@experiment("mask-fills")
def mask_fills(ctx):
    g = torch.Generator().manual_seed(ctx.seed)
    out: dict[str, float] = {}
    grid = _fill_grid(g)
    out["leak_1e9_fp32"], out["leak_1e9_bf16"] = grid[("-1e9", "fp32")]["leak"], grid[("-1e9", "bf16")]["leak"]
    out["fp16_1e9_error"] = float(bool(grid[("-1e9", "fp16")]["error"]))
    out["leak_1e4_fp16"], out["leak_finfo_fp16"] = grid[("-1e4", "fp16")]["leak"], grid[("finfo.min", "fp16")]["leak"]
    out["full_row_1e9_pad_mass"] = grid[("-1e9", "fp32")]["pad_mass"]
    out["full_row_inf_nan"] = float(grid[("-inf", "fp32")]["full"] == "NaN")
    out["zero_after_rowsum_fp32"] = grid[("zero after softmax", "fp32")]["sum"]

    mg = _mask_gradients()
    out.update({f"c18_{k}": v for k, v in mg.items()})

    # two LMs from one seed and one batch stream: -inf vs -1e9 (the same fault kernel, only the fill differs)
    train, val, vocab = char_corpus("shakespeare")
    steps = budget(ctx.preset, 30, 200, 1000)
    models, undo = {}, {}
    for arm, fault, params in (("inf", "inf_fill_no_guard", {}), ("1e9", "finite_mask_fill", {"fill": -1e9})):
        torch.manual_seed(100 * ctx.seed + 3)
        model = tiny_model(d_model=32, n_heads=2, n_layers=2, vocab_size=len(vocab), max_seq_len=LM_T,
                           tie_embeddings=False)
        undo[arm] = pitfalls.apply(model, fault, **params)
        gb = torch.Generator().manual_seed(ctx.seed)
        fit(model, lambda _s, gb=gb: lm_batch(train, LM_T, 32, gb), steps, lr=3e-3)
        models[arm] = model
    out["c20_param_maxdiff"] = max((a - b).abs().max().item() for a, b in
                                   zip(models["inf"].parameters(), models["1e9"].parameters()))
    prompts = lm_batch(val, 8, 8, torch.Generator().manual_seed(50 + ctx.seed))["input_ids"]
    gen = {arm: _greedy(m, prompts, LM_T - 8) for arm, m in models.items()}
    out["c20_gen_agreement"] = (gen["inf"] == gen["1e9"]).float().mean().item()
    vb = lm_batch(val, LM_T, 64, torch.Generator().manual_seed(777))
    with torch.no_grad():
        out["c20_val_diff"] = abs(models["inf"](**vb).loss.item() - models["1e9"](**vb).loss.item())

    ids, mask, alone = _left_padded(val, torch.Generator().manual_seed(60 + ctx.seed))
    out["leftpad_nan_inf_noguard"], _ = _leftpad_stats(models["inf"], ids, mask, alone)
    out["leftpad_nan_1e9"], out["leftpad_realdiff_1e9"] = _leftpad_stats(models["1e9"], ids, mask, alone)
    undo["inf"]()  # the same trained weights through the library's kernel: -inf with the fully-masked-row guard
    lib = models["inf"]
    out["leftpad_nan_library"], out["leftpad_realdiff_library"] = _leftpad_stats(lib, ids, mask, alone)

    # C19: the causal mask on the trained model: does a future token move any earlier output?
    x = lm_batch(val, LM_T, 8, torch.Generator().manual_seed(70 + ctx.seed))["input_ids"]
    x2 = x.clone()
    x2[:, -1] = (x2[:, -1] + 1) % len(vocab)

    def leak(model):
        with torch.no_grad():
            return (model(input_ids=x2).logits[:, :-1] - model(input_ids=x).logits[:, :-1]).abs().max().item()

    out["causal_future_leak"] = leak(lib)
    with torch.no_grad(), capture(lib, "stack.blocks.*.attn.hook_weights") as cache:
        lib(input_ids=x)
    upper = torch.ones(LM_T, LM_T, dtype=torch.bool).triu(1)
    out["causal_upper_weight_max"] = max(w[..., upper].abs().max().item() for w in cache.values())
    for fault, params in (("mask_after_softmax", {}), ("causal_off_by_one", {"causal_offset": 1})):
        with pitfalls.inject(lib, fault, **params):
            out[f"causal_future_leak_{fault}"] = leak(lib)
    _draw_masks(ctx, grid, out)
    return out


def _cell_text(cell: dict) -> tuple[str, float]:
    """(text, colour value 0 good … 1 bad) for the ordinary-row panel."""
    if cell["error"]:
        return "error:\ncannot store\nthe fill", 1.0
    if cell["sum"] < 0.999:
        return f"rows sum to\n{cell['sum']:.2f}", 0.75
    if cell["leak"] == 0:
        return "0 exactly", 0.0
    return f"leak {cell['leak']:.1e}", 0.5


def _draw_masks(ctx, grid, out):
    path = ctx.figure_path("C17-C20-mask-fills")

    def draw(axes):
        import numpy as np

        full_colour = {"zeros": 0.0, "uniform": 0.6, "NaN": 1.0, "error": 1.0, "other": 0.6}
        full_text = {"zeros": "all 0", "uniform": "uniform over\nthe padding", "NaN": "NaN", "error": "error",
                     "other": "other"}
        for ax, panel in zip(axes[:2], ("ordinary", "full")):
            colours = np.zeros((len(FILLS), len(DTYPES)))
            for i, fill in enumerate(FILLS):
                for j, dname in enumerate(DTYPES):
                    cell = grid[(fill, dname)]
                    if panel == "ordinary":
                        text, colours[i, j] = _cell_text(cell)
                    else:
                        colours[i, j] = full_colour[cell["full"]]
                        text = full_text[cell["full"]]
                    ax.text(j, i, text, ha="center", va="center", fontsize=7.5)
            ax.imshow(colours, cmap="RdYlGn_r", vmin=-0.8, vmax=1.4, aspect="auto")
            ax.set(xticks=range(len(DTYPES)), xticklabels=list(DTYPES), yticks=range(len(FILLS)),
                   yticklabels=[f"fill {f}" if f != "zero after softmax" else "zero AFTER softmax" for f in FILLS])
            ax.set_title("A row that sees ≥ 1 real key:\nprobability left on hidden keys" if panel == "ordinary"
                         else "A row that sees NO key (all padding):\nwhat softmax returns", fontsize=10)
        ax = axes[2]
        labels = ["library\n(-inf + guard)", "-inf,\nno guard", "-1e9"]
        vals = [out["leftpad_nan_library"], out["leftpad_nan_inf_noguard"], out["leftpad_nan_1e9"]]
        ax.bar(labels, [100 * v for v in vals], color=["C2", "C3", "C1"])
        for i, v in enumerate(vals):
            ax.text(i, 100 * v + 2, f"{100 * v:.0f}%", ha="center")
        ax.set(ylim=(0, 110), ylabel="real-token logits that are NaN (%)",
               title="2-layer LM, left-padded batch (fp32)")
        ax.text(1, 88, f"-inf vs -1e9 trained from one seed:\nmax |Δ weight| = {out['c20_param_maxdiff']:.1g}\n"
                         f"greedy tokens identical: {100 * out['c20_gen_agreement']:.0f}%",
                ha="center", fontsize=8, bbox={"facecolor": "white", "alpha": 0.8})
    figure(path, draw, grid=(1, 3), size=(16, 5))


HIDDEN = 1e-6  # C17-C20: probability (or logit change) at or below this on a hidden key is "≈ 0"
EXACT_ZERO = 1e-12  # C19: a weight above the diagonal at or below this is 0
RENORM_DIFF = 1e-9  # C18: zeroing + renormalising differs from masking when output or gradient move by more
AGREE = 0.99  # C20: the -inf and -1e9 twins' greedy generations agreeing on fewer tokens than this differ
C17_RULE = Ladder((
    Case("refuted", f"-1e9 leaves > {num(HIDDEN)} on a hidden key in float32",
         f"float32 下 -1e9 在被遮位置留下 > {num(HIDDEN)}",
         lambda l32, lbf, err16: l32 > HIDDEN),
    Case("supported", f"≤ {num(HIDDEN)} in float32 and bfloat16 and float16 accepts the value",
         f"float32 和 bfloat16 下都 ≤ {num(HIDDEN)}，且 float16 能存下这个值",
         lambda l32, lbf, err16: lbf <= HIDDEN and err16 == 0),
), otherwise="nuanced", otherwise_en="it holds only in some dtypes", otherwise_zh="只在部分数据类型下成立")

def _c17(ms) -> Verdict:
    f = {k: ms[k].fmt() for k in ("leak_1e9_fp32", "leak_1e9_bf16", "leak_1e4_fp16", "full_row_1e9_pad_mass")}
    err = all(v == 1 for v in ms["fp16_1e9_error"].values)
    en = (f"With -1e9 before softmax, the largest probability left on a hidden key is {f['leak_1e9_fp32']} in "
          f"float32 and {f['leak_1e9_bf16']} in bfloat16 (rows with at least one real key). "
          + ("In float16 -1e9 cannot be stored: masked_fill raises an overflow error (-1e4 gives "
             f"{f['leak_1e4_fp16']}). " if err else f"float16 with -1e4: {f['leak_1e4_fp16']}. ")
          + f"A row that sees no real key puts {f['full_row_1e9_pad_mass']} of its weight on the padding (uniform).")
    zh = (f"在 softmax 之前填 -1e9，有真实 key 的行留在被遮位置上的最大概率：float32 为 {f['leak_1e9_fp32']}，"
          "bfloat16 为 "
          f"{f['leak_1e9_bf16']}。"
          + (f"float16 存不下 -1e9：masked_fill 直接报溢出错误（-1e4 时为 {f['leak_1e4_fp16']}）。" if err
             else f"float16 用 -1e4：{f['leak_1e4_fp16']}。")
          + f"一整行都被遮住时，{f['full_row_1e9_pad_mass']} 的权重落在 padding 上（均匀分布）。")
    return seed_verdict(ms, ("leak_1e9_fp32", "leak_1e9_bf16", "fp16_1e9_error"), C17_RULE, en, zh)


claim("C17-padding-large-negative", section="§2.4",
      zh="Padding Mask用于把无效的padding位遮掉做法是在softmax之前把对应位置设为一个很大的负数比如-1e9这样softmax算出"
         "来的概率接近于0",
      en="A padding mask that writes a large negative number (e.g. -1e9) before softmax gives those keys ≈ 0 "
         "probability.",
      experiment="mask-fills",
      metrics=("leak_1e9_fp32", "leak_1e9_bf16", "fp16_1e9_error", "leak_1e4_fp16", "full_row_1e9_pad_mass"),
      rule=_c17,
      rule_text=C17_RULE.text("Softmax computed in each dtype on realistic logits (std 4)."))


C18_RULE = Ladder((
    Case("supported", f"both zeroing after softmax and zeroing + renormalising differ (output or visible-logit "
         f"gradient, > {num(HIDDEN)} / > {num(RENORM_DIFF)})",
         f"softmax 之后置零、置零再归一化都与之不同（输出或可见位置梯度，> {num(HIDDEN)} / > {num(RENORM_DIFF)}）",
         lambda af, ag, rf, rg: (af > HIDDEN or ag > HIDDEN) and (rf > RENORM_DIFF or rg > RENORM_DIFF)),
    Case("nuanced", f"only the un-renormalised version differs (> {num(HIDDEN)})",
         f"只有不重新归一化的做法不同（> {num(HIDDEN)}）", lambda af, ag, rf, rg: af > HIDDEN or ag > HIDDEN),
), otherwise="refuted", otherwise_en="neither differs", otherwise_zh="两者都没有差别")

def _c18(ms) -> Verdict:
    f = {k: ms[k].fmt() for k in ("c18_after_fwd", "c18_after_rowsum", "c18_after_grad_visible",
                                  "c18_after_grad_hidden", "c18_renorm_fwd", "c18_renorm_grad_visible",
                                  "c18_renorm_grad_hidden", "causal_future_leak_mask_after_softmax")}
    en = (f"float64. Zeroing after softmax (no renormalisation): rows sum to {f['c18_after_rowsum']}, the output "
          f"differs by {f['c18_after_fwd']}, the gradient on visible logits by {f['c18_after_grad_visible']} and the "
          f"hidden logits still receive {f['c18_after_grad_hidden']}; as a causal mask it lets a future token move "
          f"earlier outputs by {f['causal_future_leak_mask_after_softmax']}. Zeroing and renormalising the row: "
          f"output {f['c18_renorm_fwd']}, visible gradient {f['c18_renorm_grad_visible']}, hidden gradient "
          f"{f['c18_renorm_grad_hidden']} — equivalent to masking before softmax, so the post's gradient "
          "explanation does not hold for it.")
    zh = (f"float64。softmax 之后置零（不重新归一化）：每行之和为 {f['c18_after_rowsum']}，输出相差 "
          f"{f['c18_after_fwd']}，"
          f"可见位置的梯度相差 {f['c18_after_grad_visible']}，被遮位置仍得到 {f['c18_after_grad_hidden']} 的梯度；用"
          "作因果 "
          f"mask 时未来 token 会让前面的输出变化 {f['causal_future_leak_mask_after_softmax']}。置零后再按行归一化：输"
          "出相差 "
          f"{f['c18_renorm_fwd']}，可见梯度 {f['c18_renorm_grad_visible']}，被遮梯度 {f['c18_renorm_grad_hidden']}——与 "
          "softmax 之前遮盖等价，原文关于梯度的解释对它不成立。")
    return seed_verdict(ms, ("c18_after_fwd", "c18_after_grad_visible", "c18_renorm_fwd", "c18_renorm_grad_visible"),
                        C18_RULE, en, zh)


claim("C18-zeroing-after-softmax", section="§2.4",
      zh="如果直接在softmax之后把attention矩阵里某些位置置零效果看似一样实际上softmax已经把这些位置的梯度传给了其他位置数值上并不等价",
      en="Zeroing attention weights after softmax is not equivalent to masking before it (the gradient has already "
         "flowed through the hidden positions).",
      experiment="mask-fills",
      metrics=("c18_after_fwd", "c18_after_rowsum", "c18_after_grad_visible", "c18_after_grad_hidden",
               "c18_renorm_fwd", "c18_renorm_grad_visible", "c18_renorm_grad_hidden",
               "causal_future_leak_mask_after_softmax"),
      rule=_c18,
      rule_text=C18_RULE.text("float64, against masking before softmax."))


C19_RULE = Ladder((
    Case("supported", f"earlier logits move by ≤ {num(HIDDEN)} and every weight above the diagonal is 0 "
         f"(≤ {num(EXACT_ZERO)})", f"前面位置的 logits 变化 ≤ {num(HIDDEN)}，且对角线以上的权重都为 0（≤ "
         f"{num(EXACT_ZERO)}）",
         lambda leak_, upper: leak_ <= HIDDEN and upper <= EXACT_ZERO),
), otherwise="refuted", otherwise_en="the future leaks into earlier positions",
   otherwise_zh="未来信息泄漏到了前面的位置")

def _c19(ms) -> Verdict:
    f = {k: ms[k].fmt() for k in ("causal_future_leak", "causal_upper_weight_max",
                                  "causal_future_leak_causal_off_by_one", "causal_future_leak_mask_after_softmax")}
    en = (f"A trained 2-layer LM with the library's causal mask (-inf above the diagonal, before softmax): changing "
          f"the last token moves earlier logits by {f['causal_future_leak']}, and the largest weight above the "
          f"diagonal is {f['causal_upper_weight_max']}. For contrast, a diagonal shifted by one leaks "
          f"{f['causal_future_leak_causal_off_by_one']}, and zeroing after softmax leaks "
          f"{f['causal_future_leak_mask_after_softmax']}.")
    zh = ("训练好的 2 层语言模型使用本库的因果 mask（softmax 之前把对角线以上置为 -inf）：改变最后一个 token，前面位"
          "置的 "
          f"logits 变化 {f['causal_future_leak']}，对角线以上的最大权重为 {f['causal_upper_weight_max']}。对照：对角"
          "线错一位时"
          f"泄漏 {f['causal_future_leak_causal_off_by_one']}，softmax 之后再置零时泄漏 "
          f"{f['causal_future_leak_mask_after_softmax']}。")
    return seed_verdict(ms, ("causal_future_leak", "causal_upper_weight_max"), C19_RULE, en, zh)


claim("C19-causal-mask", section="§2.4",
      zh="Causal Mask用于自回归场景要求每个位置只能看到它自己以及之前的位置做法是把注意力分数矩阵的上三角部分全部置为"
         "-inf然后才做softmax",
      en="A causal mask sets the upper triangle of the scores to -inf before softmax, so each position sees only "
         "itself and the past.",
      experiment="mask-fills",
      metrics=("causal_future_leak", "causal_upper_weight_max", "causal_future_leak_causal_off_by_one",
               "causal_future_leak_mask_after_softmax"),
      rule=_c19,
      rule_text=C19_RULE.text("Future-token perturbation on a trained LM."))


C20_RULE = Ladder((
    Case("supported", f"-1e9 leaves > {num(HIDDEN)} on hidden keys in float32 or the greedy generations of the "
                      f"-inf and "
         f"-1e9 twins (same seed, same batches, same kernel) agree on < {AGREE:.0%} of tokens",
         f"float32 下 -1e9 在被遮位置留下 > {num(HIDDEN)}，或 -inf 与 -1e9 两个孪生模型的贪心生成一致率 < {AGREE:.0%}",
         lambda leak32, pdiff, agree: leak32 > HIDDEN or agree < AGREE),
    Case("refuted", "nothing leaks and the twins end bit-identical with identical generations",
         "没有泄漏，两个孪生模型参数逐位相同、生成完全一致", lambda leak32, pdiff, agree: pdiff == 0 and agree == 1),
), otherwise="nuanced", otherwise_en=f"nothing leaks beyond the threshold and the generations agree on ≥ {AGREE:.0%} "
   "of tokens, but the twins are not identical",
   otherwise_zh=f"泄漏未超过阈值、生成一致率 ≥ {AGREE:.0%}，但两个孪生模型并不完全相同")

def _c20(ms) -> Verdict:
    f = {k: ms[k].fmt() for k in ("leak_1e9_fp32", "c20_param_maxdiff", "c20_gen_agreement", "c20_val_diff",
                                  "leftpad_nan_inf_noguard", "leftpad_nan_1e9", "leftpad_nan_library",
                                  "leftpad_realdiff_1e9")}
    err = all(v == 1 for v in ms["fp16_1e9_error"].values)
    en = (f"-1e9 leaves {f['leak_1e9_fp32']} probability on future keys in float32. Two LMs trained from one seed "
          f"on the same batches, one with -inf and one with -1e9, end with weights that differ by at most "
          f"{f['c20_param_maxdiff']}, validation losses that differ by {f['c20_val_diff']}, and greedy generations "
          f"that agree on {f['c20_gen_agreement']} of the tokens. With left padding, -inf without a guard makes "
          f"{f['leftpad_nan_inf_noguard']} of the real-token logits NaN, -1e9 {f['leftpad_nan_1e9']} (real tokens "
          f"unchanged to {f['leftpad_realdiff_1e9']}), the library (-inf + guard) {f['leftpad_nan_library']}."
          + (" In float16, -1e9 cannot even be written (overflow error)." if err else ""))
    zh = (f"float32 下 -1e9 留在未来位置上的概率为 {f['leak_1e9_fp32']}。同一种子、相同批次训练两个语言模型，一个用 "
          "-inf、一个"
          f"用 -1e9：权重最大相差 {f['c20_param_maxdiff']}，验证损失相差 {f['c20_val_diff']}，贪心生成的 token 有 "
          f"{f['c20_gen_agreement']} 相同。左侧 padding 时，-inf 且不处理全遮行会使 {f['leftpad_nan_inf_noguard']} 的"
          "真实 "
          f"token logits 变成 NaN，-1e9 为 {f['leftpad_nan_1e9']}（真实 token 与单独计算相差 "
          f"{f['leftpad_realdiff_1e9']}），"
          f"本库（-inf + 保护）为 {f['leftpad_nan_library']}。"
          + ("float16 下根本写不进 -1e9（溢出报错）。" if err else ""))
    return seed_verdict(ms, ("leak_1e9_fp32", "c20_param_maxdiff", "c20_gen_agreement"), C20_RULE, en, zh)


claim("C20-mask-fill", section="§2.4",
      zh="我一开始图省事把-inf写成了-1e9结果训练出的模型在生成测试时会逐步出现输出质量下降…残留的微小概率还是会被模型利用到。建议直接用-inf",
      en="Writing -1e9 instead of -inf leaks a little probability that the model exploits, degrading generation; "
         "always use -inf.",
      experiment="mask-fills",
      metrics=("leak_1e9_fp32", "c20_param_maxdiff", "c20_gen_agreement", "c20_val_diff", "leftpad_nan_inf_noguard",
               "leftpad_nan_1e9", "leftpad_nan_library", "leftpad_realdiff_1e9", "fp16_1e9_error"),
      rule=_c20,
      rule_text=C20_RULE.text())
