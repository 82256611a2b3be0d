"""The four views of each positional scheme, computed by ``components/positional``: the table (or score bias) as
a heatmap, a few dimensions as waves, similarity against the relative offset, and what happens past the training
length. Plain data (:class:`PEData`, lists of floats): ``viz_pe.py`` checks the arguments and draws them, the HTML
page (``page.py``) embeds them."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

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

    def to_dict(self) -> dict[str, Any]:
        def clean(v: float) -> float | None:
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

    def to_dict(self) -> dict[str, Any]:
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


def _pe_sinusoidal(
    *, pos: torch.Tensor, offsets: torch.Tensor, d: int, max_len: int, train_len: int, n_heads: int
) -> PEData:
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


def _pe_learned(
    *, pos: torch.Tensor, offsets: torch.Tensor, d: int, max_len: int, train_len: int, n_heads: int
) -> PEData:
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


def _pe_rope(*, pos: torch.Tensor, offsets: torch.Tensor, d: int, max_len: int, train_len: int, n_heads: int) -> PEData:
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


def _pe_alibi(
    *, pos: torch.Tensor, offsets: torch.Tensor, d: int, max_len: int, train_len: int, n_heads: int
) -> PEData:
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


def _pe_t5(*, pos: torch.Tensor, offsets: torch.Tensor, d: int, max_len: int, train_len: int, n_heads: int) -> PEData:
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


BUILDERS: dict[str, Callable[..., PEData]] = {  # kind -> the builder of its four views (keyword arguments)
    "sinusoidal": _pe_sinusoidal,
    "learned": _pe_learned,
    "rope": _pe_rope,
    "alibi": _pe_alibi,
    "t5": _pe_t5,
}
