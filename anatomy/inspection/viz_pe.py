"""The positional-encoding pictures: for each scheme the table, a few dimensions as waves, similarity against
the relative offset, and what happens past the training length, all computed by ``components/positional``."""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass, field

import torch

from anatomy.components.positional import (
    ALiBiPositional,
    LearnedPositional,
    T5RelativeBias,
    alibi_slopes,
    apply_rope,
    rope_angles,
    sinusoidal_table,
    t5_bucket,
)
from anatomy.inspection.figures import _fonts, bi, new_figure

PE_KINDS = ("sinusoidal", "learned", "rope", "alibi", "t5")


# --------------------------------------------------------------------------------------------------- positional


@dataclass
class Panel:
    """One panel of the positional-encoding picture: a heatmap (``image``) or line series over ``x``."""

    title: tuple[str, str]  # (English, 中文)
    xlabel: str
    ylabel: str
    x: list[float] = field(default_factory=list)
    series: list[tuple[str, list[float]]] = field(default_factory=list)
    image: list[list[float]] | None = None  # rows × columns; NaN where undefined
    vline: float | None = None  # the training length, where it applies
    hline: float | None = None  # a row marker on heatmaps
    note: str = ""

    def to_dict(self) -> dict:
        def clean(v):
            return None if isinstance(v, float) and not math.isfinite(v) else v

        return {
            "title": list(self.title),
            "xlabel": self.xlabel,
            "ylabel": self.ylabel,
            "x": [clean(v) for v in self.x],
            "series": [{"label": lab, "y": [clean(v) for v in ys]} for lab, ys in self.series],
            "image": None if self.image is None else [[clean(v) for v in row] for row in self.image],
            "vline": self.vline,
            "hline": self.hline,
            "note": self.note,
        }


@dataclass
class PEData:
    kind: str
    title: tuple[str, str]
    heatmap: Panel
    waves: Panel
    similarity: Panel
    beyond: Panel
    note: str = ""

    def panels(self) -> list[Panel]:
        return [self.heatmap, self.waves, self.similarity, self.beyond]

    def to_dict(self) -> dict:
        return {
            "kind": self.kind,
            "title": list(self.title),
            "note": self.note,
            "panels": [p.to_dict() for p in self.panels()],
        }


def _rows(t: torch.Tensor, digits: int = 5) -> list[list[float]]:
    return [[round(float(v), digits) if math.isfinite(float(v)) else float("nan") for v in row] for row in t]


def _line(t: torch.Tensor, digits: int = 5) -> list[float]:
    return [round(float(v), digits) if math.isfinite(float(v)) else float("nan") for v in t]


def _max_cos_to_seen(features: torch.Tensor, train_len: int) -> torch.Tensor:
    """For each position, the largest cosine similarity of its features to any position seen in training."""
    f = torch.nn.functional.normalize(features.double(), dim=-1)
    return (f @ f[:train_len].T).max(-1).values  # (P,)


def _pick_dims(count: int, k: int = 4) -> list[int]:
    return sorted({0, count // 8, count // 4, count - 1} if k == 4 else set(range(min(k, count))))


def check_pe_args(kind: str, d_model: int, max_len: int, train_len: int, n_heads: int) -> None:
    if kind not in PE_KINDS:
        raise ValueError(f"--kind must be one of {', '.join(PE_KINDS)}, got {kind!r}")
    for name, value, low in (
        ("--d-model", d_model, 4),
        ("--max-len", max_len, 4),
        ("--train-len", train_len, 2),
        ("--heads", n_heads, 1),
    ):
        if not isinstance(value, int) or value < low:
            raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    if d_model % 2:
        raise ValueError(f"--d-model must be even (sin/cos and rotation pairs), got {d_model}")
    if d_model > 1024 or max_len > 4096:
        raise ValueError(f"--d-model <= 1024 and --max-len <= 4096 keep the picture readable, got {d_model}, {max_len}")
    if train_len >= max_len:
        raise ValueError(
            f"--train-len must be smaller than --max-len={max_len} to show what happens past it, got {train_len}"
        )


def positional_data(
    kind: str, *, d_model: int = 64, max_len: int = 128, train_len: int = 64, n_heads: int = 8, seed: int = 0
) -> PEData:
    """Four computed views of one positional scheme: table, waves, similarity vs offset, past ``train_len``."""
    check_pe_args(kind, d_model, max_len, train_len, n_heads)
    pos = torch.arange(max_len)
    half = max_len // 2
    offsets = torch.arange(-half + 1, half)  # keys relative to the query
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return _PE_BUILDERS[kind](
            pos=pos, offsets=offsets, d=d_model, max_len=max_len, train_len=train_len, n_heads=n_heads
        )


def _pe_sinusoidal(*, pos, offsets, d, max_len, train_len, n_heads):
    table = sinusoidal_table(pos, d).double()  # (P, D)
    dims = sorted({0, 2 * (d // 16), 2 * (d // 8), d - 2})
    p0 = max_len // 2
    sim = table[p0 + offsets] @ table[p0] / (d / 2)  # (K,)
    return PEData(
        "sinusoidal",
        ("Sinusoidal positional encoding (Vaswani et al. 2017)", "正弦位置编码"),
        Panel(
            ("PE(p, i): sin on even i, cos on odd i", "位置编码表"),
            "dimension i",
            "position p",
            image=_rows(table, 4),
            hline=train_len - 0.5,
        ),
        Panel(
            ("low dims: dense saw-tooth; high dims: slow sine", "低维锯齿波、高维平缓正弦波"),
            "position p",
            "PE(p, i)",
            x=pos.tolist(),
            series=[(f"dim {i} (period {2 * math.pi * 10000 ** (i / d):.0f})", _line(table[:, i])) for i in dims],
            vline=train_len,
        ),
        Panel(
            ("dot product vs relative offset", "点积相似度与相对偏移"),
            "offset k",
            "PE(p)·PE(p+k) / (D/2)",
            x=offsets.tolist(),
            series=[(f"p = {p0}", _line(sim))],
            note="depends on k only: PE(p+k) = M(k) PE(p)",
        ),
        Panel(
            ("past the training length", "超出训练长度"),
            "position p",
            "max cos to a trained position",
            x=pos.tolist(),
            series=[("sinusoidal", _line(_max_cos_to_seen(table, train_len)))],
            vline=train_len,
            note="defined at every position, but new combinations appear past the training length",
        ),
        note=f"D={d}, base 10000; computed by anatomy.components.positional.sinusoidal_table",
    )


def _pe_learned(*, pos, offsets, d, max_len, train_len, n_heads):
    module = LearnedPositional(d_model=d, max_seq_len=train_len)
    table = torch.full((max_len, d), float("nan"), dtype=torch.float64)
    table[:train_len] = module.weight.detach().double()
    try:  # what the component does one position past its table
        module.add_to_embeddings(torch.zeros(1, 1, d), torch.tensor([[train_len]]))
        error = "no error"
    except ValueError as err:
        error = f"ValueError: {err}"
    p0 = train_len // 2
    ks = offsets[(p0 + offsets >= 0) & (p0 + offsets < train_len)]
    sim = table[p0 + ks] @ table[p0]
    norms = table.norm(dim=-1)
    return PEData(
        "learned",
        ("Learned absolute positions (BERT, GPT-2)", "可学习位置编码"),
        Panel(
            ("the table: one vector per position (random init)", "位置表（随机初始化）"),
            "dimension i",
            "position p",
            image=_rows(table, 4),
            hline=train_len - 0.5,
            note=f"rows past max_seq_len={train_len} do not exist",
        ),
        Panel(
            ("a few dimensions (untrained: noise)", "几个维度（未训练：噪声）"),
            "position p",
            "PE(p, i)",
            x=pos.tolist(),
            series=[(f"dim {i}", _line(table[:, i])) for i in range(3)],
            vline=train_len,
        ),
        Panel(
            ("dot product vs relative offset", "点积相似度与相对偏移"),
            "offset k",
            "PE(p)·PE(p+k)",
            x=ks.tolist(),
            series=[(f"p = {p0}", _line(sim))],
            note="untrained: only k = 0 stands out; training gives the table its structure",
        ),
        Panel(
            ("past the training length: no parameters", "超出训练长度：没有参数"),
            "position p",
            "‖PE(p)‖",
            x=pos.tolist(),
            series=[("‖PE(p)‖", _line(norms))],
            vline=train_len,
            note=error,
        ),
        note=f"D={d}, max_seq_len={train_len}; init N(0, 0.02) as LearnedPositional does; untrained",
    )


def _pe_rope(*, pos, offsets, d, max_len, train_len, n_heads):
    angles = rope_angles(pos[None], d, 10000.0, torch.float64)[0, 0]  # (P, Dh/2)
    pairs = _pick_dims(d // 2)
    ones = torch.ones(1, 1, max_len, d, dtype=torch.float64)
    rotated = apply_rope(ones, angles[None, None], "half")[0, 0]  # (P, Dh): the all-ones vector at each position
    p0 = max_len // 2
    score = rotated[p0 + offsets] @ rotated[p0] / d
    features = torch.cat([angles.cos(), angles.sin()], dim=-1)
    slow = angles[train_len - 1, -1].item()
    return PEData(
        "rope",
        ("Rotary position embedding, RoPE (Su et al. 2021)", "旋转位置编码 RoPE"),
        Panel(
            ("cos(p·θ_i): the rotation of each pair", "每对维度的旋转角 cos(p·θ_i)"),
            "pair i",
            "position p",
            image=_rows(angles.cos(), 4),
            hline=train_len - 0.5,
        ),
        Panel(
            ("fast and slow pairs", "高频对与低频对"),
            "position p",
            "cos(p·θ_i)",
            x=pos.tolist(),
            series=[(f"pair {i}", _line(angles[:, i].cos())) for i in pairs],
            vline=train_len,
        ),
        Panel(
            ("q·k depends on the offset only", "q·k 只取决于相对偏移"),
            "offset k",
            "R(p)q · R(p+k)k / Dh",
            x=offsets.tolist(),
            series=[("q = k = 1", _line(score))],
            note="long-term decay of RoFormer §3.4.3",
        ),
        Panel(
            ("past the training length", "超出训练长度"),
            "position p",
            "max cos to a trained position",
            x=pos.tolist(),
            series=[("rotation features", _line(_max_cos_to_seen(features, train_len)))],
            vline=train_len,
            note=f"the slowest pair turns only {slow:.2f} rad within the training length: angles past it are new",
        ),
        note=f"Dh={d}, base 10000, layout 'half'; computed by rope_angles and apply_rope",
    )


def _pe_alibi(*, pos, offsets, d, max_len, train_len, n_heads):
    slopes = alibi_slopes(n_heads).double()
    module = ALiBiPositional(n_heads=n_heads)
    bias = module.score_bias(None, pos[None], pos[None], 1.0)[0].double()  # (H, P, P)
    heads = sorted({0, n_heads // 2, n_heads - 1})
    q = train_len - 1
    weights = torch.softmax(bias[:, q, : q + 1], dim=-1)  # content scores all equal: position alone decides
    far = []
    for h in heads:  # weight on keys further than train_len, for a query at each position (causal)
        row = []
        for p in pos.tolist():
            w = torch.softmax(bias[h, p, : p + 1], dim=-1)
            row.append(float(w[: max(0, p - train_len + 1)].sum()))
        far.append((f"head {h} (m = {slopes[h]:.3g})", row))
    return PEData(
        "alibi",
        ("ALiBi: linear biases (Press et al. 2022)", "ALiBi 线性偏置"),
        Panel(
            (f"bias −m·|i−j| of head 0 (m = {slopes[0]:.3g})", "头 0 的偏置"),
            "key j",
            "query i",
            image=_rows(bias[0], 3),
            hline=train_len - 0.5,
        ),
        Panel(
            ("bias seen by the last query, per head", "最后一个查询看到的偏置"),
            "key j",
            "bias",
            x=pos.tolist(),
            series=[(f"head {h}", _line(bias[h, -1])) for h in heads],
            vline=train_len,
        ),
        Panel(
            ("softmax weight vs offset (equal content scores)", "内容分数相同时的权重与偏移"),
            "offset k",
            "weight",
            x=list(range(-q, 1)),
            series=[(f"head {h}", _line(weights[h])) for h in heads],
        ),
        Panel(
            ("past the training length: weight on unseen distances", "超出训练长度：落在未见距离上的权重"),
            "query position p",
            f"weight on keys further than {train_len}",
            x=pos.tolist(),
            series=far,
            vline=train_len,
            note="no table to run out of: steep heads never reach that far, flat heads do",
        ),
        note=f"H={n_heads}, slopes 2^(-8h/H); computed by ALiBiPositional.score_bias",
    )


def _pe_t5(*, pos, offsets, d, max_len, train_len, n_heads):
    buckets, max_distance = 32, max(train_len, 9)
    module = T5RelativeBias(n_heads=n_heads, num_buckets=buckets, max_distance=max_distance)
    rel = pos[None, :] - pos[:, None]  # (P, P): j - i
    table = t5_bucket(rel, bidirectional=True, num_buckets=buckets, max_distance=max_distance)
    ks = offsets
    by_offset = t5_bucket(ks, bidirectional=True, num_buckets=buckets, max_distance=max_distance)
    bias = module.relative_attention_bias.weight.detach().double()[by_offset]  # (K, H)
    past = t5_bucket(-pos, bidirectional=False, num_buckets=buckets, max_distance=max_distance)
    return PEData(
        "t5",
        ("T5 bucketed relative bias (Raffel et al. 2020)", "T5 分桶相对位置偏置"),
        Panel(
            ("bucket id of (query i, key j)", "查询 i 与键 j 的桶编号"),
            "key j",
            "query i",
            image=[[float(v) for v in row] for row in table],
        ),
        Panel(
            ("bucket vs offset: exact near 0, log-spaced further", "桶与偏移：近处精确、远处对数"),
            "offset k",
            "bucket",
            x=ks.tolist(),
            series=[("bidirectional", [float(v) for v in by_offset])],
        ),
        Panel(
            ("learned bias vs offset (random init)", "偏置与偏移（随机初始化）"),
            "offset k",
            "bias",
            x=ks.tolist(),
            series=[(f"head {h}", _line(bias[:, h])) for h in range(min(3, n_heads))],
            note="one scalar per (bucket, head); untrained",
        ),
        Panel(
            ("past max_distance: one shared bucket", "超过最大距离：共用一个桶"),
            "distance into the past",
            "bucket (decoder)",
            x=pos.tolist(),
            series=[("unidirectional", [float(v) for v in past])],
            vline=max_distance,
            note=f"every distance >= max_distance={max_distance} lands in bucket {buckets - 1}",
        ),
        note=f"H={n_heads}, {buckets} buckets, max_distance={max_distance} (= --train-len); computed by t5_bucket",
    )


_PE_BUILDERS = {
    "sinusoidal": _pe_sinusoidal,
    "learned": _pe_learned,
    "rope": _pe_rope,
    "alibi": _pe_alibi,
    "t5": _pe_t5,
}


def positional_figure(data: PEData):
    """Heatmap, waves, similarity vs offset and behaviour past the training length, in one 2 × 2 figure."""
    import matplotlib as mpl

    with _fonts():
        fig = new_figure(figsize=(13, 9), layout="constrained")
        axes = fig.subplots(2, 2)
        for ax, panel in zip(axes.flat, data.panels()):
            ax.set_title(bi(*panel.title), fontsize=10)
            ax.set_xlabel(panel.xlabel)
            ax.set_ylabel(panel.ylabel)
            if panel.image is not None:
                cmap = mpl.colormaps["RdBu_r"].with_extremes(bad="#dddddd")
                img = torch.tensor(panel.image, dtype=torch.float64)
                lim = float(img[img.isfinite()].abs().max()) if img.isfinite().any() else 1.0
                vmin = -lim if float(img[img.isfinite()].min()) < 0 else 0.0
                im = ax.imshow(
                    img.numpy(),
                    aspect="auto",
                    cmap=cmap if vmin < 0 else "viridis",
                    vmin=vmin,
                    vmax=lim,
                    interpolation="nearest",
                )
                fig.colorbar(im, ax=ax, shrink=0.85)
                if panel.hline is not None:
                    ax.axhline(panel.hline, color="k", lw=1, ls="--")
                    ax.text(
                        0.01,
                        panel.hline,
                        "training length",
                        va="bottom",
                        fontsize=7,
                        color="k",
                        transform=ax.get_yaxis_transform(),
                        bbox={"facecolor": "white", "alpha": 0.8, "lw": 0},
                    )
            else:
                for label, ys in panel.series:
                    ax.plot(panel.x, ys, lw=1.3, label=label)
                ax.legend(fontsize=7, loc="best")
                ax.grid(alpha=0.3)
                if panel.vline is not None:
                    ax.axvline(panel.vline, color="k", lw=1, ls="--")
                    ax.axvspan(panel.vline, max(panel.x), color="#f4d6d6", alpha=0.4, lw=0)
            if panel.note:  # under the axis label, where it hides no data
                ax.set_xlabel(f"{panel.xlabel}\n{textwrap.fill(panel.note, 90)}", fontsize=9)
        fig.suptitle(bi(*data.title), fontsize=13)
        fig.text(0.0, -0.01, data.note + "  ·  shaded: past the training length", fontsize=8, va="top", color="#444")
    return fig
