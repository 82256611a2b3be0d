"""§1: the head-count sweep (claims C1–C3 and, from §2, C12–C14).

``head-count``          one setup, three tasks: the ordered-pair task y_t = 10·x_{t-1} + x_{t-3} (1-layer models,
                        h = 1 vs 4), a character LM on Shakespeare (h = 1, 2, 4, 8 at d_model = 64, so d_k = 64 … 8)
                        and Chinese sentiment classification on a small training subset (same head counts). C1–C3
                        read the attention of these models; C12–C14 the losses and accuracies.
"""

from __future__ import annotations

import collections
import time
from typing import Any, cast

import torch
from torch import nn

from anatomy import ModelConfig
from anatomy.experiments.devices import cpu_draws, synchronize
from anatomy.experiments.figures import figure, heatmap
from anatomy.experiments.fitting import Batches, budget, build, fit, model_device, tiny_model
from anatomy.experiments.probes import ablate_head, attention_entropy, hook_output, offset_profile
from anatomy.experiments.registry import Trial, experiment
from anatomy.experiments.tasks import char_corpus, lm_batch

# =============================================================================================================
# head-count: the ordered-pair task, a character LM and a small classification task, at several head counts
# =============================================================================================================

PAIR_T, PAIR_K = 8, 10  # sequence length, digits; y_t = K·x_{t-1} + x_{t-3} has K² = 100 classes
PAIR_CEILING = 1 / PAIR_K  # accuracy reachable from one of the two relations alone (the other digit guessed)
LM_HEADS = (1, 2, 4, 8)  # at d_model = 64: d_k = 64, 32, 16, 8
CLS_HEADS = (1, 4, 8)  # classification: d_k = 64, 16, 8
LM_D, LM_T = 64, 32
CLS_T = 40
Encoded = tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # token ids, padding mask, labels
SPECIALISED = 0.5  # a head with at least this share of its mass on one offset is specialised on it (C3)


def pair_batch(n: int, g: torch.Generator, device: str = "cpu") -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """Ordered pairs: digits x, target y_t = 10·x_{t-1} + x_{t-3} at t >= 3. Position t of the LM predicts
    ``labels[t + 1]``, so ``labels[:, t + 1] = y_t``; returns the LM inputs and ``y (N, T)`` (-100 where undefined),
    drawn on the CPU and moved to ``device``."""
    with cpu_draws():
        x = torch.randint(0, PAIR_K, (n, PAIR_T), generator=g)  # (N, T)
        y = torch.full((n, PAIR_T), -100)
        y[:, 3:] = PAIR_K * x[:, 2:-1] + x[:, :-3]
        labels = torch.full((n, PAIR_T), -100)
        labels[:, 1:] = y[:, :-1]
    return {"input_ids": x.to(device), "labels": labels.to(device)}, y.to(device)


def _pair_accuracy(model: nn.Module, batch: dict[str, torch.Tensor], y: torch.Tensor) -> float:
    with torch.no_grad():
        pred = model(input_ids=batch["input_ids"]).logits.argmax(-1)  # (N, T)
    rows = slice(3, PAIR_T - 1)  # y_t defined from t = 3; y_{T-1} has no label slot and is never trained
    return float((pred[:, rows] == y[:, rows]).float().mean().item())


def _weights(model: nn.Module, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    return hook_output(model, "stack.blocks.0.attn.hook_weights", **inputs).float()  # (B, H, T, T)


def _sentiment(n_train: int, seed: int) -> tuple[Encoded, Encoded, int]:
    """Chinese product reviews (embedded): a seeded subset of ``n_train`` training examples, validation = the
    val + test splits; characters seen at least twice in the subset, others -> <unk> (1), pad 0."""
    from anatomy.data import labelled_splits

    parts = labelled_splits("sentiment-zh", 0)
    order = torch.randperm(len(parts["train"]), generator=torch.Generator().manual_seed(seed), device="cpu")[:n_train]
    train = [parts["train"][i] for i in order.tolist()]
    val = parts["val"] + parts["test"]
    counts = collections.Counter(c for text, _ in train for c in text)
    stoi = {c: i + 2 for i, c in enumerate(sorted(c for c, n in counts.items() if n >= 2))}

    def encode(
        rows: list[tuple[str, int]],
    ) -> Encoded:  # on the CPU: the batches are drawn from it (fit and _cls_accuracy move them)
        with cpu_draws():
            ids = torch.zeros(len(rows), CLS_T, dtype=torch.long)
            mask = torch.zeros(len(rows), CLS_T, dtype=torch.bool)
            for r, (text, _) in enumerate(rows):
                tok = [stoi.get(c, 1) for c in text[:CLS_T]]
                ids[r, : len(tok)] = torch.tensor(tok)
                mask[r, : len(tok)] = True
            return ids, mask, torch.tensor([label for _, label in rows])

    return encode(train), encode(val), len(stoi) + 2


def _cls_accuracy(model: nn.Module, data: Encoded) -> float:
    ids, mask, labels = (t.to(model_device(model)) for t in data)
    with torch.no_grad():
        pred = model(input_ids=ids, attention_mask=mask).logits.argmax(-1)
    return float((pred == labels).float().mean().item())


def _step_time(models: dict[int, nn.Module], batch: dict[str, torch.Tensor], repeats: int) -> dict[int, float]:
    """Seconds per forward + backward, min over interleaved repeats (the min is robust to a busy machine). On a
    GPU the clock is read after the queued kernels are done."""
    best = {h: float("inf") for h in models}
    for _ in range(repeats):
        for h, m in models.items():
            m.train()
            device = model_device(m)
            synchronize(device)
            t0 = time.perf_counter()
            m(**batch).loss.backward()
            synchronize(device)
            best[h] = min(best[h], time.perf_counter() - t0)
            m.zero_grad(set_to_none=True)
            m.eval()
    return best


HEAD_COUNT_UNITS = {
    **{f"acc_pair_h{h}": "%" for h in (1, 4)},
    **{f"cls_acc_h{h}": "%" for h in CLS_HEADS},
    **{f"cls_gap_h{h}": " pts" for h in CLS_HEADS},
    **{f"lm_val_h{h}": " nats" for h in LM_HEADS},
    "lm_small_dk_penalty": " nats",
    "cls_small_dk_penalty": " pts",
    "lm_dk64_minus_best": " nats",
    "cls_gap_h8_minus_h1": " pts",
    "cls_diff_h8_minus_h4": " pts",
    "time_ratio_h8_vs_h1": "×",
    "lm_h4_prev_head_ablation_dloss": " nats",
}


@experiment("head-count", units=HEAD_COUNT_UNITS)
def head_count(trial: Trial) -> dict[str, float]:
    """Single vs multi-head on three tasks; attention entropy, offsets, ablations, accuracy, time per step."""
    out: dict[str, float] = {}
    seed, dev = trial.seed, trial.device

    # --- 1. ordered pairs: can one head carry two relations? ----------------------------------------------------
    pair_steps = budget(trial.preset, 60, 600, 3000)
    pair_bs = budget(trial.preset, 64, 256, 256)
    test_batch, test_y = pair_batch(2000, torch.Generator().manual_seed(10_000 + seed), dev)
    pair: dict[int, dict[str, Any]] = {}  # heads → model, accuracy, offset profile, entropy
    for h in (1, 4):
        torch.manual_seed(100 * seed + h)
        model = tiny_model(
            dev, d_model=32, n_heads=h, n_layers=1, vocab_size=PAIR_K**2, max_seq_len=PAIR_T, tie_embeddings=False
        )
        g = torch.Generator().manual_seed(seed)
        fit(model, cast(Batches, lambda _s, g=g: pair_batch(pair_bs, g)[0]), pair_steps, lr=5e-3, warmup=100)
        acc = _pair_accuracy(model, test_batch, test_y)
        w = _weights(model, {"input_ids": test_batch["input_ids"][:500]})
        prof = offset_profile(w, 7, rows=slice(3, PAIR_T - 1))  # (H, 8): mass at offsets 0..7 (rows t >= 3)
        ent = attention_entropy(w, 3, PAIR_T - 1)
        pair[h] = {"model": model, "acc": acc, "profile": prof.cpu(), "entropy": ent.cpu()}
        out[f"acc_pair_h{h}"] = 100 * acc
    p1 = pair[1]["profile"][0]
    out["pair_h1_mass_t1"], out["pair_h1_mass_t3"] = p1[1].item(), p1[3].item()
    out["pair_h1_order_ratio"] = (p1[1] / (p1[1] + p1[3]).clamp_min(1e-12)).item()
    out["ent_pair_h1"] = pair[1]["entropy"].mean().item()
    out["ent_pair_h4_mean"] = pair[4]["entropy"].mean().item()
    # specialisation and ablation in the 4-head model
    prof4, model4 = pair[4]["profile"], pair[4]["model"]
    head_for = {k: int(prof4[:, k].argmax()) for k in (1, 3)}
    out["pair_h4_specialised_heads"] = float(sum(1 for hh in range(4) if prof4[hh, [1, 3]].max() >= SPECIALISED))
    out["pair_h4_covers"] = float(
        head_for[1] != head_for[3] and all(prof4[head_for[k], k] >= SPECIALISED for k in (1, 3))
    )
    attn4 = model4.stack.blocks[0].attn
    drops = []
    for hh in range(4):
        with ablate_head(attn4, hh):
            drops.append(1 - _pair_accuracy(model4, test_batch, test_y) / max(pair[4]["acc"], 1e-9))
    out["pair_h4_ablation_min_drop"] = min(drops[head_for[1]], drops[head_for[3]])

    # --- 2. character LM: entropy per head, offsets, d_k, time per step -----------------------------------------
    train, val, vocab = char_corpus("shakespeare")
    lm_steps = budget(trial.preset, 30, 250, 1500)
    lm_bs = budget(trial.preset, 16, 32, 32)
    gv = torch.Generator().manual_seed(777)
    val_batches = [lm_batch(val, LM_T, 64, gv, dev) for _ in range(budget(trial.preset, 1, 4, 8))]
    gt = torch.Generator().manual_seed(778)
    train_eval = [lm_batch(train, LM_T, 64, gt, dev) for _ in range(budget(trial.preset, 1, 4, 8))]
    lm: dict[int, Any] = {}  # heads → model (Any: its sub-modules are read by attribute)
    lm_ent: dict[int, torch.Tensor] = {}
    lm_prof: dict[int, torch.Tensor] = {}
    for h in LM_HEADS:
        torch.manual_seed(100 * seed + 10 + h)
        model = tiny_model(
            dev,
            d_model=LM_D,
            n_heads=h,
            n_layers=1,
            vocab_size=len(vocab),
            max_seq_len=LM_T,
            tie_embeddings=False,
            init="xavier",
        )
        if h == 1:
            out["ent_lm_init"] = (
                attention_entropy(_weights(model, {"input_ids": val_batches[0]["input_ids"]}), 7, LM_T).mean().item()
            )
        g = torch.Generator().manual_seed(seed)
        fit(model, cast(Batches, lambda _s, g=g: lm_batch(train, LM_T, lm_bs, g)), lm_steps, lr=3e-3)
        out[f"lm_val_h{h}"] = _mean_loss(model, val_batches)
        out[f"lm_train_h{h}"] = _mean_loss(model, train_eval)
        w = _weights(model, {"input_ids": val_batches[0]["input_ids"]})
        lm_ent[h] = attention_entropy(w, 7, LM_T).cpu()
        lm_prof[h] = offset_profile(w, 8).cpu()
        lm[h] = model
    out["ent_lm_h1"] = lm_ent[1].mean().item()
    out["ent_lm_h4_mean"] = lm_ent[4].mean().item()
    out["ent_lm_h4_min"] = lm_ent[4].min().item()
    prev = int(lm_prof[4][:, 1].argmax())
    out["lm_h4_prev_char_mass"] = lm_prof[4][prev, 1].item()
    with ablate_head(lm[4].stack.blocks[0].attn, prev):
        out["lm_h4_prev_head_ablation_dloss"] = _mean_loss(lm[4], val_batches) - out["lm_val_h4"]
    times = _step_time(
        lm, lm_batch(train, LM_T, 32, torch.Generator().manual_seed(5), dev), budget(trial.preset, 2, 20, 40)
    )
    out.update({f"lm_step_ms_h{h}": 1000 * t for h, t in times.items()})
    out["time_ratio_h8_vs_h1"] = times[8] / times[1]
    best_ge32 = min(out["lm_val_h1"], out["lm_val_h2"])
    out["lm_small_dk_penalty"] = (out["lm_val_h4"] + out["lm_val_h8"]) / 2 - best_ge32
    out["lm_dk64_minus_best"] = out["lm_val_h1"] - min(out[f"lm_val_h{h}"] for h in LM_HEADS)

    # --- 3. small-data classification (sentiment-zh): accuracy, train–val gap ----------------------------------
    n_train = budget(trial.preset, 300, 2000, 2000)
    tr, va, v_size = _sentiment(n_train, seed)
    cls_steps = budget(trial.preset, 30, 200, 800)
    train_eval_cls = (tr[0][:1000], tr[1][:1000], tr[2][:1000])
    cls = {}
    for h in CLS_HEADS:
        torch.manual_seed(100 * seed + 20 + h)
        model = build(
            ModelConfig(
                architecture="classifier",
                vocab_size=v_size,
                d_model=LM_D,
                n_heads=h,
                n_layers=1,
                max_seq_len=CLS_T,
                pooling="mean",
                num_labels=2,
                dropout=0.0,
                init="xavier",
            ),
            dev,
        )
        g = torch.Generator().manual_seed(seed)

        def batch(_s: int, g: torch.Generator = g) -> dict[str, torch.Tensor]:
            j = torch.randint(0, n_train, (32,), generator=g, device="cpu")
            return {"input_ids": tr[0][j], "attention_mask": tr[1][j], "labels": tr[2][j]}

        fit(model, batch, cls_steps, lr=2e-3, warmup=20, decay=True)
        cls[h] = (100 * _cls_accuracy(model, train_eval_cls), 100 * _cls_accuracy(model, va))
        out[f"cls_acc_h{h}"] = cls[h][1]
        out[f"cls_gap_h{h}"] = cls[h][0] - cls[h][1]
    out["cls_small_dk_penalty"] = cls[1][1] - (cls[4][1] + cls[8][1]) / 2
    out["cls_gap_h8_minus_h1"] = out["cls_gap_h8"] - out["cls_gap_h1"]
    out["cls_diff_h8_minus_h4"] = out["cls_acc_h8"] - out["cls_acc_h4"]

    _draw_heads(trial, out, pair, lm_ent, lm_prof, drops, head_for)
    _draw_head_count(trial, out)
    return out


def _mean_loss(model: nn.Module, batches: list[dict[str, torch.Tensor]]) -> float:
    with torch.no_grad():
        return float(sum(model(**b).loss.item() for b in batches) / len(batches))


def _draw_heads(
    trial: Trial,
    out: dict[str, float],
    pair: dict[int, dict[str, Any]],
    lm_ent: dict[int, torch.Tensor],
    lm_prof: dict[int, torch.Tensor],
    drops: list[float],
    head_for: dict[int, int],
) -> None:
    path = trial.figure_path("C1-C3-attention-per-head")

    def draw(axes: list[Any]) -> None:
        import numpy as np

        ax = axes[0]
        x0 = 0
        for h in LM_HEADS:
            xs = np.arange(x0, x0 + h)
            ax.bar(xs, lm_ent[h].numpy(), color="C0" if h == 1 else "C1")
            ax.text(x0 + (h - 1) / 2, 1.03, f"h={h}", ha="center", fontsize=8)
            x0 += h + 1
        ax.axhline(1.0, color="k", ls="--", lw=0.8)
        ax.set(
            ylim=(0, 1.12),
            xticks=[],
            ylabel="entropy / log(#visible keys)",
            title="Char LM (Shakespeare): entropy of each head\n1 = uniform (diffuse), 0 = one key",
        )
        ax = axes[1]
        e1, e4 = pair[1]["entropy"].numpy(), pair[4]["entropy"].numpy()
        ax.bar([0], e1, color="C0")
        ax.bar(np.arange(2, 6), e4, color="C1")
        ax.axhline(1.0, color="k", ls="--", lw=0.8)
        ax.set(
            ylim=(0, 1.12),
            xticks=[0, 2, 3, 4, 5],
            xticklabels=["h=1", "h4:0", "h4:1", "h4:2", "h4:3"],
            title="Ordered-pair task: entropy of each head",
        )
        ax = axes[2]
        accs = [out["acc_pair_h1"], out["acc_pair_h4"]]
        ax.bar(["1 head", "4 heads"], accs, color=["C0", "C1"])
        ax.axhline(100 * PAIR_CEILING, color="r", ls="--", lw=1, label="one relation only (10%)")
        ax.axhline(1.0, color="gray", ls=":", lw=1, label="chance (1%)")
        for i, a in enumerate(accs):
            ax.text(i, a + 1, f"{a:.0f}%", ha="center")
        ax.set(ylim=(0, 110), ylabel="test accuracy (%)", title="y_t = 10·x(t-1) + x(t-3): 100 classes")
        ax.legend(fontsize=8, loc="center right")
        ax = axes[3]
        rows = torch.cat([pair[1]["profile"][:, :6], pair[4]["profile"][:, :6]])
        shares = torch.cat([rows, (1 - rows.sum(-1, keepdim=True)).clamp_min(0)], dim=-1).numpy()
        heatmap(ax, shares, label_above=0.05)
        ax.set(
            xticks=range(7),
            xticklabels=[*map(str, range(6)), "other"],
            xlabel="offset (key = query − offset)",
            yticks=range(5),
            yticklabels=["h=1", "h4: head 0", "head 1", "head 2", "head 3"],
            title="Ordered pairs: attention mass by offset\n(the task needs offsets 1 and 3)",
        )
        ax = axes[4]
        prof = torch.cat([lm_prof[4], (1 - lm_prof[4].sum(-1, keepdim=True)).clamp_min(0)], dim=-1).numpy()
        heatmap(ax, prof, label_above=0.1)
        ax.set(
            xticks=range(prof.shape[1]),
            xticklabels=[*map(str, range(prof.shape[1] - 1)), "≥9"],
            xlabel="offset (0 = itself, 1 = previous character)",
            yticks=range(4),
            yticklabels=[f"head {i}" for i in range(4)],
            title="Char LM, 4 heads: attention mass by offset",
        )
        ax = axes[5]
        colors = ["C2" if i == head_for[1] else "C3" if i == head_for[3] else "gray" for i in range(4)]
        ax.bar([f"head {i}" for i in range(4)], [100 * d for d in drops], color=colors)
        ax.set(
            ylabel="relative accuracy drop (%)",
            ylim=(0, 105),
            title="Ordered pairs, 4 heads: zero one head\n(green: offset-1 head, red: offset-3 head)",
        )

    figure(path, draw, grid=(2, 3), size=(15, 8.5))


def _draw_head_count(trial: Trial, out: dict[str, float]) -> None:
    path = trial.figure_path("C12-C14-head-count")

    def by_head_size(ax: Any, heads: tuple[int, ...], **labels: str) -> list[int]:
        """A log axis of d_k = d_model / h, each tick also naming h; returns the d_k values."""
        dks = [LM_D // h for h in heads]
        ax.set(xscale="log", xticks=dks, xticklabels=[f"{d}\n(h={LM_D // d})" for d in dks], **labels)
        return dks

    def draw(axes: list[Any]) -> None:
        dks = by_head_size(
            axes[0], LM_HEADS, xlabel="d_k (heads) at d_model = 64", ylabel="validation loss (nats/char)"
        )
        axes[0].plot(dks, [out[f"lm_val_h{h}"] for h in LM_HEADS], "o-")
        axes[0].set(title="Char LM: loss vs head size")
        cdks = by_head_size(axes[1], CLS_HEADS, xlabel="d_k (heads)", ylabel="accuracy (%)")
        axes[1].plot(cdks, [out[f"cls_acc_h{h}"] for h in CLS_HEADS], "o-", label="validation")
        axes[1].plot(cdks, [out[f"cls_acc_h{h}"] + out[f"cls_gap_h{h}"] for h in CLS_HEADS], "s--", label="train")
        axes[1].set(title="Sentiment (zh), 2000 training reviews:\ntrain vs validation accuracy")
        axes[1].legend(fontsize=8)
        axes[2].bar([f"h={h}" for h in LM_HEADS], [out[f"lm_step_ms_h{h}"] for h in LM_HEADS])
        axes[2].set(
            ylabel="ms per forward+backward",
            title="Time per training step at d_model = 64\n(CPU, best of interleaved repeats)",
        )
        for ax in axes[:2]:
            ax.minorticks_off()

    figure(path, draw, grid=(1, 3), size=(14, 4.2))
