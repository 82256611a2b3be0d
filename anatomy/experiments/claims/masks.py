"""§2.4: masks and fill values, the experiment (its claims C17–C20 are judged in masks_claims.py).

``mask-fills``           every fill value × dtype, masking after softmax, the causal mask's exactness, and two LMs
                         trained with -inf and -1e9 from the same seed.
"""

from __future__ import annotations

from typing import Any, cast

import torch
from torch import nn

from anatomy import pitfalls
from anatomy.experiments.devices import cpu_draws
from anatomy.experiments.figures import figure
from anatomy.experiments.fitting import POST_SIZES, Batches, budget, fit, tiny_model
from anatomy.experiments.registry import Trial, experiment
from anatomy.experiments.tasks import LM_T, char_corpus, lm_batch
from anatomy.inspection import capture

# =============================================================================================================
# mask-fills: C17–C20
# =============================================================================================================

FILLS = ("-inf", "-1e9", "-1e4", "finfo.min", "zero after softmax")
Grid = dict[tuple[str, str], dict[str, Any]]  # (fill, dtype) → leak, sum, full, error
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def _fill_grid(g: torch.Generator, device: str = "cpu") -> Grid:
    """For every fill × dtype: masked_fill then softmax *in that dtype*. ``leak``: largest probability on a hidden
    key in rows that see ≥ 1 key; ``sum``: mean row sum there; ``full``: what a row that sees no key gets
    ('NaN', 'uniform', 'zeros'); ``error``: the message if masked_fill refused the value."""
    rows, keys = 64, 16
    with cpu_draws():  # drawn on the CPU's generator, then moved
        scores = 4 * torch.randn(rows, keys, generator=g)  # (R, S) realistic logits
        mask = torch.rand(rows, keys, generator=g) < 0.6  # True = may attend
        mask[:, 0] = True  # every ordinary row sees at least one key
        mask[-1] = False  # the last row sees nothing (an all-padding sequence, a left pad under a causal mask)
    scores, mask = scores.to(device), mask.to(device)
    ordinary = slice(0, rows - 1)
    grid: dict[tuple[str, str], dict[str, Any]] = {}
    for fill in FILLS:
        for dname, dtype in DTYPES.items():
            s = scores.to(dtype)
            cell: dict[str, Any] = {"error": ""}
            if fill == "zero after softmax":
                p = (s.softmax(-1) * mask).float()
            else:
                value = {"-inf": float("-inf"), "-1e9": -1e9, "-1e4": -1e4, "finfo.min": torch.finfo(dtype).min}[fill]
                try:
                    p = s.masked_fill(~mask, value).softmax(-1).float()
                except RuntimeError as err:
                    grid[(fill, dname)] = {
                        "error": str(err).split(" without")[0],
                        "leak": float("nan"),
                        "sum": float("nan"),
                        "full": "error",
                        "pad_mass": float("nan"),
                    }
                    continue
            hidden = p[ordinary].masked_fill(mask[ordinary], 0.0)
            cell["leak"] = hidden.max().item()
            cell["sum"] = p[ordinary].sum(-1).mean().item()
            last = p[-1]
            cell["pad_mass"] = last.sum().item()
            cell["full"] = (
                "NaN"
                if torch.isnan(last).any()
                else "zeros"
                if last.abs().max() == 0
                else "uniform"
                if (last - 1 / keys).abs().max() < 1e-2
                else "other"
            )
            grid[(fill, dname)] = cell
    return grid


def _mask_gradients(device: str = "cpu") -> dict[str, float]:
    """float64: mask before softmax vs zeroing after softmax, without and with renormalising the row."""
    g = torch.Generator().manual_seed(11)
    r, n, dv = 32, 12, 8
    with cpu_draws():  # drawn on the CPU's generator, then moved
        s0 = torch.randn(r, n, generator=g, dtype=torch.float64) * 2
        mask = torch.rand(r, n, generator=g) < 0.5
        mask[:, 0] = True
        v = torch.randn(n, dv, generator=g, dtype=torch.float64)
        upstream = torch.randn(r, dv, generator=g, dtype=torch.float64)
    s0, mask, v, upstream = (t.to(device) for t in (s0, mask, v, upstream))

    def run(kind: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        s = s0.clone().requires_grad_(True)
        if kind == "before":
            p = s.masked_fill(~mask, float("-inf")).softmax(-1)
        else:
            p = s.softmax(-1) * mask
            if kind == "renorm":
                p = p / p.sum(-1, keepdim=True)
        out = p @ v
        torch.autograd.backward((out * upstream).sum())
        assert s.grad is not None
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


def _greedy(model: nn.Module, prompts: torch.Tensor, new: int) -> torch.Tensor:
    """Greedy decoding by full recomputation (so the causal mask and its fill are used at every step)."""
    ids = prompts
    with torch.no_grad():
        for _ in range(new):
            nxt = model(input_ids=ids).logits[:, -1].argmax(-1, keepdim=True)
            ids = torch.cat([ids, nxt], dim=1)
    return ids[:, prompts.shape[1] :]


def _left_padded(
    data: torch.Tensor, g: torch.Generator, t: int = 16, device: str = "cpu"
) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
    lengths = [t, t - 3, t - 7, t - 12]
    with cpu_draws():  # made on the CPU (the data's device), then moved
        ids = torch.zeros(len(lengths), t, dtype=torch.long)
        mask = torch.zeros(len(lengths), t, dtype=torch.long)
        alone = []
        for i, n in enumerate(lengths):
            s = int(torch.randint(0, len(data) - n, (1,), generator=g))
            ids[i, t - n :], mask[i, t - n :] = data[s : s + n], 1
            alone.append(data[s : s + n][None].to(device))
    return ids.to(device), mask.to(device), alone


def _leftpad_stats(
    model: nn.Module, ids: torch.Tensor, mask: torch.Tensor, alone: list[torch.Tensor]
) -> tuple[float, float]:
    """(share of real-token logits that are NaN, largest |difference| of real-token logits vs each row alone)."""
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask).logits  # (B, T, V)
        real = logits[mask.bool()]
        nan = torch.isnan(real).float().mean().item()
        diff = max(
            (logits[i, -a.shape[1] :] - model(input_ids=a).logits[0]).abs().max().item() for i, a in enumerate(alone)
        )
    return nan, diff


@experiment("mask-fills")
def mask_fills(trial: Trial) -> dict[str, float]:
    g, dev = torch.Generator().manual_seed(trial.seed), trial.device
    out: dict[str, float] = {}
    grid = _fill_grid(g, dev)
    out["leak_1e9_fp32"], out["leak_1e9_bf16"] = grid[("-1e9", "fp32")]["leak"], grid[("-1e9", "bf16")]["leak"]
    out["fp16_1e9_error"] = float(bool(grid[("-1e9", "fp16")]["error"]))
    out["leak_1e4_fp16"], out["leak_finfo_fp16"] = grid[("-1e4", "fp16")]["leak"], grid[("finfo.min", "fp16")]["leak"]
    out["full_row_1e9_pad_mass"] = grid[("-1e9", "fp32")]["pad_mass"]
    out["full_row_inf_nan"] = float(grid[("-inf", "fp32")]["full"] == "NaN")
    out["zero_after_rowsum_fp32"] = grid[("zero after softmax", "fp32")]["sum"]

    mg = _mask_gradients(dev)
    out.update({f"c18_{k}": v for k, v in mg.items()})

    # two LMs from one seed and one batch stream: -inf vs -1e9 (the same fault kernel, only the fill differs)
    train, val, vocab = char_corpus("shakespeare")
    steps = budget(trial.preset, 30, 200, 1000)
    models, undo = {}, {}
    params: dict[str, Any]  # keyword arguments of one pitfall
    for arm, fault, params in (("inf", "inf_fill_no_guard", {}), ("1e9", "finite_mask_fill", {"fill": -1e9})):
        torch.manual_seed(100 * trial.seed + 3)
        model = tiny_model(
            dev,
            d_model=budget(trial.preset, 32, 32, 32, POST_SIZES["d_model"]),
            n_heads=budget(trial.preset, 2, 2, 2, POST_SIZES["n_heads"]),
            n_layers=budget(trial.preset, 2, 2, 2, POST_SIZES["n_layers"]),
            vocab_size=len(vocab),
            max_seq_len=LM_T,
            tie_embeddings=False,
        )
        undo[arm] = pitfalls.apply(model, fault, **params)
        gb = torch.Generator().manual_seed(trial.seed)
        fit(model, cast(Batches, lambda _s, gb=gb: lm_batch(train, LM_T, 32, gb)), steps, lr=3e-3)
        models[arm] = model
    out["c20_param_maxdiff"] = max(
        (a - b).abs().max().item() for a, b in zip(models["inf"].parameters(), models["1e9"].parameters())
    )
    prompts = lm_batch(val, 8, 8, torch.Generator().manual_seed(50 + trial.seed), dev)["input_ids"]
    gen = {arm: _greedy(m, prompts, LM_T - 8) for arm, m in models.items()}
    out["c20_gen_agreement"] = (gen["inf"] == gen["1e9"]).float().mean().item()
    vb = lm_batch(val, LM_T, 64, torch.Generator().manual_seed(777), dev)
    with torch.no_grad():
        out["c20_val_diff"] = abs(models["inf"](**vb).loss.item() - models["1e9"](**vb).loss.item())

    ids, mask, alone = _left_padded(val, torch.Generator().manual_seed(60 + trial.seed), device=dev)
    out["leftpad_nan_inf_noguard"], _ = _leftpad_stats(models["inf"], ids, mask, alone)
    out["leftpad_nan_1e9"], out["leftpad_realdiff_1e9"] = _leftpad_stats(models["1e9"], ids, mask, alone)
    undo["inf"]()  # the same trained weights through the library's kernel: -inf with the fully-masked-row guard
    lib = models["inf"]
    out["leftpad_nan_library"], out["leftpad_realdiff_library"] = _leftpad_stats(lib, ids, mask, alone)

    # C19: the causal mask on the trained model: does a future token move any earlier output?
    x = lm_batch(val, LM_T, 8, torch.Generator().manual_seed(70 + trial.seed), dev)["input_ids"]
    x2 = x.clone()
    x2[:, -1] = (x2[:, -1] + 1) % len(vocab)

    def leak(model: nn.Module) -> float:
        with torch.no_grad():
            return float((model(input_ids=x2).logits[:, :-1] - model(input_ids=x).logits[:, :-1]).abs().max().item())

    out["causal_future_leak"] = leak(lib)
    with torch.no_grad(), capture(lib, "stack.blocks.*.attn.hook_weights") as cache:
        lib(input_ids=x)
    upper = torch.ones(LM_T, LM_T, dtype=torch.bool, device=dev).triu(1)
    out["causal_upper_weight_max"] = max(w[..., upper].abs().max().item() for w in cache.values())
    for fault, params in (("mask_after_softmax", {}), ("causal_off_by_one", {"causal_offset": 1})):
        with pitfalls.inject(lib, fault, **params):
            out[f"causal_future_leak_{fault}"] = leak(lib)
    _draw_masks(trial, grid, out)
    return out


def _cell_text(cell: dict[str, Any]) -> tuple[str, float]:
    """(text, colour value 0 good … 1 bad) for the ordinary-row panel."""
    if cell["error"]:
        return "error:\ncannot store\nthe fill", 1.0
    if cell["sum"] < 0.999:
        return f"rows sum to\n{cell['sum']:.2f}", 0.75
    if cell["leak"] == 0:
        return "0 exactly", 0.0
    return f"leak {cell['leak']:.1e}", 0.5


def _draw_masks(trial: Trial, grid: Grid, out: dict[str, float]) -> None:
    path = trial.figure_path("C17-C20-mask-fills")

    def draw(axes: list[Any]) -> None:
        import numpy as np

        full_colour = {"zeros": 0.0, "uniform": 0.6, "NaN": 1.0, "error": 1.0, "other": 0.6}
        full_text = {
            "zeros": "all 0",
            "uniform": "uniform over\nthe padding",
            "NaN": "NaN",
            "error": "error",
            "other": "other",
        }
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
            ax.set(
                xticks=range(len(DTYPES)),
                xticklabels=list(DTYPES),
                yticks=range(len(FILLS)),
                yticklabels=[f"fill {f}" if f != "zero after softmax" else "zero AFTER softmax" for f in FILLS],
            )
            ax.set_title(
                "A row that sees ≥ 1 real key:\nprobability left on hidden keys"
                if panel == "ordinary"
                else "A row that sees NO key (all padding):\nwhat softmax returns",
                fontsize=10,
            )
        ax = axes[2]
        labels = ["library\n(-inf + guard)", "-inf,\nno guard", "-1e9"]
        vals = [out["leftpad_nan_library"], out["leftpad_nan_inf_noguard"], out["leftpad_nan_1e9"]]
        ax.bar(labels, [100 * v for v in vals], color=["C2", "C3", "C1"])
        for i, v in enumerate(vals):
            ax.text(i, 100 * v + 2, f"{100 * v:.0f}%", ha="center")
        ax.set(ylim=(0, 110), ylabel="real-token logits that are NaN (%)", title="2-layer LM, left-padded batch (fp32)")
        ax.text(
            1,
            88,
            f"-inf vs -1e9 trained from one seed:\nmax |Δ weight| = {out['c20_param_maxdiff']:.1g}\ngreedy "
            f"tokens identical: {100 * out['c20_gen_agreement']:.0f}%",
            ha="center",
            fontsize=8,
            bbox={"facecolor": "white", "alpha": 0.8},
        )

    figure(path, draw, grid=(1, 3), size=(16, 5))
