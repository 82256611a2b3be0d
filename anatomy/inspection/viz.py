"""Pictures a learner can keep: attention maps, positional encodings, masks and what fill values do to softmax.

Every number drawn here is computed by the package's own components (positional tables from
``components/positional``, masks from ``components/masks``, weights from the model's attention or
:mod:`anatomy.inspection.weights`); nothing is typed by hand.

Figures are plain ``matplotlib.figure.Figure`` objects (no pyplot, no global state) saved with :func:`save_figure`
as PNG or SVG. Chinese text needs a CJK font: :func:`cjk_font` looks for one on the system (WenQuanYi, Noto CJK,
Source Han, ...). Without one, Chinese labels are left out and Chinese tokens are drawn as ``U+XXXX`` code points,
with :data:`CJK_HINT` saying which package to install, never as empty boxes.
"""

from __future__ import annotations

import functools
import math
import os
import textwrap
from collections.abc import Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

from anatomy.components.kernels import math_attention
from anatomy.components.masks import (
    causal_mask,
    combine,
    key_padding_to_attention,
    padding_mask,
    sliding_window_mask,
)
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
from anatomy.inspection.weights import LayerWeights, head_entropy

PE_KINDS = ("sinusoidal", "learned", "rope", "alibi", "t5")
CJK_HINT = ("no CJK font found, so Chinese text is drawn as U+XXXX code points; install one, e.g. "
            "`apt-get install fonts-wqy-microhei` (Debian/Ubuntu) or a Noto CJK font")
TOKENIZER_NOTE = ("tokens: one per character, id = ord(char) mod vocab_size={vocab} "
                  "(character-level, no trained tokenizer)")

# Font families known to cover CJK, in order of preference.
_CJK_FAMILIES = (
    "WenQuanYi Micro Hei", "WenQuanYi Zen Hei", "Noto Sans CJK SC", "Noto Sans CJK JP", "Noto Sans SC",
    "Noto Serif CJK SC", "Source Han Sans SC", "Source Han Sans CN", "Droid Sans Fallback", "AR PL UMing CN",
    "AR PL UKai CN", "SimHei", "Microsoft YaHei", "PingFang SC", "Heiti SC", "Hiragino Sans GB", "Arial Unicode MS",
)


# --------------------------------------------------------------------------------------------------- fonts


@functools.lru_cache(maxsize=1)
def _find_cjk_font() -> str | None:
    from matplotlib import font_manager
    from matplotlib.ft2font import FT2Font

    entries = {f.name: f.fname for f in font_manager.fontManager.ttflist}
    candidates = [n for n in _CJK_FAMILIES if n in entries]
    candidates += sorted(n for n in entries if any(w in n for w in ("CJK", "Hei", "Han Sans", "WenQuanYi", "Ming"))
                         and n not in candidates)
    for name in candidates:
        try:
            if FT2Font(entries[name]).get_char_index(ord("中")):
                return name
        except (OSError, RuntimeError, ValueError):
            continue
    return None


def cjk_font() -> str | None:
    """The family name of an installed font with Chinese glyphs, or ``None``."""
    return _find_cjk_font()


def is_cjk(ch: str) -> bool:
    o = ord(ch)
    return 0x2E80 <= o <= 0x9FFF or 0xF900 <= o <= 0xFAFF or 0xFF00 <= o <= 0xFFEF or 0x20000 <= o <= 0x2FA1F


def needs_cjk(text: str) -> bool:
    return any(is_cjk(c) for c in text)


def bi(en: str, zh: str) -> str:
    """A bilingual label when Chinese can be drawn, else the English one."""
    return f"{en} · {zh}" if cjk_font() else en


def drawable(token: str) -> str:
    """The token itself, or its code point when no installed font can draw it."""
    if cjk_font() or not needs_cjk(token):
        return token
    return "".join(f"U+{ord(c):04X}" if is_cjk(c) else c for c in token)


@contextmanager
def _fonts():
    """rcParams for one figure: DejaVu Sans for Latin text, falling back per glyph to the CJK font."""
    import matplotlib as mpl

    families = ["DejaVu Sans"] + ([cjk_font()] if cjk_font() else [])
    with mpl.rc_context({"font.family": families, "axes.unicode_minus": True, "svg.fonttype": "path"}):
        yield


def new_figure(**kwargs):
    from matplotlib.figure import Figure

    return Figure(**kwargs)


def save_figure(fig, path: str | os.PathLike) -> str:
    """Save ``fig`` as PNG or SVG (by extension); returns the path. Errors name the path."""
    path = os.fspath(path)
    ext = os.path.splitext(path)[1].lower()
    if ext not in (".png", ".svg"):
        raise ValueError(f"--out must end in .png, .svg or .html, got {path!r}")
    with _fonts():
        fig.savefig(path, dpi=110 if ext == ".png" else None, bbox_inches="tight")
    return path


def figure_svg(fig) -> str:
    """The figure as an SVG string (glyphs as paths: self-contained)."""
    import io

    buf = io.StringIO()
    with _fonts():
        fig.savefig(buf, format="svg", bbox_inches="tight")
    text = buf.getvalue()
    return text[text.index("<svg"):]


# --------------------------------------------------------------------------------------------------- tokens


def char_tokens(text: str, vocab_size: int) -> tuple[list[str], torch.Tensor]:
    """Character-level tokens and ids ``(1, T)``: each character's code point modulo ``vocab_size``."""
    if not isinstance(text, str) or not text:
        raise ValueError("--text must be a non-empty string")
    tokens = list(text)
    return tokens, torch.tensor([[ord(c) % vocab_size for c in tokens]])  # (1, T)


# --------------------------------------------------------------------------------------------------- attention


def _tick_step(n: int) -> int:
    return max(1, math.ceil(n / 32))


def attention_figure(layer: LayerWeights, q_tokens: Sequence[str], k_tokens: Sequence[str] | None = None, *,
                     batch: int = 0, title: str = "", note: str = ""):
    """A grid of the heads of one layer: rows are queries, columns keys, each title with the head's entropy."""
    k_tokens = list(q_tokens) if k_tokens is None else list(k_tokens)
    weights = layer.weights[batch].float()  # (h, T, S)
    n = weights.shape[0]
    t, s = weights.shape[-2:]
    if (t, s) != (len(q_tokens), len(k_tokens)):
        raise ValueError(f"tokens ({len(q_tokens)} queries, {len(k_tokens)} keys) do not match the weights "
                         f"(T={t}, S={s})")
    entropy = head_entropy(weights)
    cols = min(4, n)
    rows = math.ceil(n / cols)
    cell = max(2.6, min(5.0, 0.28 * max(t, s)))
    with _fonts():
        fig = new_figure(figsize=(cell * cols + 1.2, cell * rows + 1.6), layout="constrained")
        axes = fig.subplots(rows, cols, squeeze=False)
        vmax = float(weights.max()) or 1.0
        qs, ks = [drawable(x) for x in q_tokens], [drawable(x) for x in k_tokens]
        image = None
        for i, ax in enumerate(axes.flat):
            if i >= n:
                ax.set_visible(False)
                continue
            image = ax.imshow(weights[i].numpy(), cmap="Blues", vmin=0.0, vmax=vmax, aspect="equal")
            step_k, step_q = _tick_step(s), _tick_step(t)
            long_labels = max(len(x) for x in ks) * s > 30  # labels would touch: stand them up
            ax.set_xticks(range(0, s, step_k), ks[::step_k], fontsize=8, rotation=90 if long_labels else 0)
            ax.set_yticks(range(0, t, step_q), qs[::step_q], fontsize=8)
            ax.set_title(f"head {layer.heads[i]} · " + bi(f"entropy {entropy[i]:.2f} nats",
                                                           f"熵 {entropy[i]:.2f}"), fontsize=10)
            if i % cols == 0:
                ax.set_ylabel(bi("query", "查询"))
            if i // cols == rows - 1:
                ax.set_xlabel(bi("key", "键"))
        fig.colorbar(image, ax=axes, shrink=0.8, label=bi("attention weight", "注意力权重"))
        head = title or f"layer {layer.index} ({layer.name})"
        fig.suptitle(head + f" · max entropy log(S) = {math.log(s):.2f} nats", fontsize=12)
        notes = [note] if note else []
        if needs_cjk("".join(q_tokens) + "".join(k_tokens)) and not cjk_font():
            notes.append(CJK_HINT)
        if notes:
            fig.text(0.0, -0.01, "\n".join(notes), fontsize=8, va="top", ha="left", color="#444")
    return fig


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

        return {"title": list(self.title), "xlabel": self.xlabel, "ylabel": self.ylabel,
                "x": [clean(v) for v in self.x],
                "series": [{"label": lab, "y": [clean(v) for v in ys]} for lab, ys in self.series],
                "image": None if self.image is None else [[clean(v) for v in row] for row in self.image],
                "vline": self.vline, "hline": self.hline, "note": self.note}


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
        return {"kind": self.kind, "title": list(self.title), "note": self.note,
                "panels": [p.to_dict() for p in self.panels()]}


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
    for name, value, low in (("--d-model", d_model, 4), ("--max-len", max_len, 4), ("--train-len", train_len, 2),
                             ("--heads", n_heads, 1)):
        if not isinstance(value, int) or value < low:
            raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    if d_model % 2:
        raise ValueError(f"--d-model must be even (sin/cos and rotation pairs), got {d_model}")
    if d_model > 1024 or max_len > 4096:
        raise ValueError(f"--d-model <= 1024 and --max-len <= 4096 keep the picture readable, got {d_model}, "
                         f"{max_len}")
    if train_len >= max_len:
        raise ValueError(f"--train-len must be smaller than --max-len={max_len} to show what happens past it, "
                         f"got {train_len}")


def positional_data(kind: str, *, d_model: int = 64, max_len: int = 128, train_len: int = 64, n_heads: int = 8,
                    seed: int = 0) -> PEData:
    """Four computed views of one positional scheme: table, waves, similarity vs offset, past ``train_len``."""
    check_pe_args(kind, d_model, max_len, train_len, n_heads)
    pos = torch.arange(max_len)
    half = max_len // 2
    offsets = torch.arange(-half + 1, half)  # keys relative to the query
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return _PE_BUILDERS[kind](pos=pos, offsets=offsets, d=d_model, max_len=max_len, train_len=train_len,
                                  n_heads=n_heads)


def _pe_sinusoidal(*, pos, offsets, d, max_len, train_len, n_heads):
    table = sinusoidal_table(pos, d).double()  # (P, D)
    dims = sorted({0, 2 * (d // 16), 2 * (d // 8), d - 2})
    p0 = max_len // 2
    sim = table[p0 + offsets] @ table[p0] / (d / 2)  # (K,)
    return PEData(
        "sinusoidal", ("Sinusoidal positional encoding (Vaswani et al. 2017)", "正弦位置编码"),
        Panel(("PE(p, i): sin on even i, cos on odd i", "位置编码表"), "dimension i", "position p",
              image=_rows(table, 4), hline=train_len - 0.5),
        Panel(("low dims: dense saw-tooth; high dims: slow sine", "低维锯齿波、高维平缓正弦波"), "position p",
              "PE(p, i)", x=pos.tolist(),
              series=[(f"dim {i} (period {2 * math.pi * 10000 ** (i / d):.0f})", _line(table[:, i])) for i in dims],
              vline=train_len),
        Panel(("dot product vs relative offset", "点积相似度与相对偏移"), "offset k",
              "PE(p)·PE(p+k) / (D/2)", x=offsets.tolist(), series=[(f"p = {p0}", _line(sim))],
              note="depends on k only: PE(p+k) = M(k) PE(p)"),
        Panel(("past the training length", "超出训练长度"), "position p", "max cos to a trained position",
              x=pos.tolist(), series=[("sinusoidal", _line(_max_cos_to_seen(table, train_len)))], vline=train_len,
              note="defined at every position, but new combinations appear past the training length"),
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
        "learned", ("Learned absolute positions (BERT, GPT-2)", "可学习位置编码"),
        Panel(("the table: one vector per position (random init)", "位置表（随机初始化）"), "dimension i",
              "position p", image=_rows(table, 4), hline=train_len - 0.5,
              note=f"rows past max_seq_len={train_len} do not exist"),
        Panel(("a few dimensions (untrained: noise)", "几个维度（未训练：噪声）"), "position p", "PE(p, i)",
              x=pos.tolist(), series=[(f"dim {i}", _line(table[:, i])) for i in range(3)], vline=train_len),
        Panel(("dot product vs relative offset", "点积相似度与相对偏移"), "offset k", "PE(p)·PE(p+k)",
              x=ks.tolist(), series=[(f"p = {p0}", _line(sim))],
              note="untrained: only k = 0 stands out; training gives the table its structure"),
        Panel(("past the training length: no parameters", "超出训练长度：没有参数"), "position p", "‖PE(p)‖",
              x=pos.tolist(), series=[("‖PE(p)‖", _line(norms))], vline=train_len, note=error),
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
        "rope", ("Rotary position embedding, RoPE (Su et al. 2021)", "旋转位置编码 RoPE"),
        Panel(("cos(p·θ_i): the rotation of each pair", "每对维度的旋转角 cos(p·θ_i)"), "pair i", "position p",
              image=_rows(angles.cos(), 4), hline=train_len - 0.5),
        Panel(("fast and slow pairs", "高频对与低频对"), "position p", "cos(p·θ_i)", x=pos.tolist(),
              series=[(f"pair {i}", _line(angles[:, i].cos())) for i in pairs], vline=train_len),
        Panel(("q·k depends on the offset only", "q·k 只取决于相对偏移"), "offset k",
              "R(p)q · R(p+k)k / Dh", x=offsets.tolist(), series=[("q = k = 1", _line(score))],
              note="long-term decay of RoFormer §3.4.3"),
        Panel(("past the training length", "超出训练长度"), "position p", "max cos to a trained position",
              x=pos.tolist(), series=[("rotation features", _line(_max_cos_to_seen(features, train_len)))],
              vline=train_len,
              note=f"the slowest pair turns only {slow:.2f} rad within the training length: angles past it are new"),
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
        "alibi", ("ALiBi: linear biases (Press et al. 2022)", "ALiBi 线性偏置"),
        Panel((f"bias −m·|i−j| of head 0 (m = {slopes[0]:.3g})", "头 0 的偏置"), "key j", "query i",
              image=_rows(bias[0], 3), hline=train_len - 0.5),
        Panel(("bias seen by the last query, per head", "最后一个查询看到的偏置"), "key j", "bias",
              x=pos.tolist(), series=[(f"head {h}", _line(bias[h, -1])) for h in heads], vline=train_len),
        Panel(("softmax weight vs offset (equal content scores)", "内容分数相同时的权重与偏移"), "offset k",
              "weight", x=list(range(-q, 1)), series=[(f"head {h}", _line(weights[h])) for h in heads]),
        Panel(("past the training length: weight on unseen distances", "超出训练长度：落在未见距离上的权重"),
              "query position p", f"weight on keys further than {train_len}", x=pos.tolist(), series=far,
              vline=train_len, note="no table to run out of: steep heads never reach that far, flat heads do"),
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
        "t5", ("T5 bucketed relative bias (Raffel et al. 2020)", "T5 分桶相对位置偏置"),
        Panel(("bucket id of (query i, key j)", "查询 i 与键 j 的桶编号"), "key j", "query i",
              image=[[float(v) for v in row] for row in table]),
        Panel(("bucket vs offset: exact near 0, log-spaced further", "桶与偏移：近处精确、远处对数"), "offset k",
              "bucket", x=ks.tolist(), series=[("bidirectional", [float(v) for v in by_offset])]),
        Panel(("learned bias vs offset (random init)", "偏置与偏移（随机初始化）"), "offset k", "bias",
              x=ks.tolist(), series=[(f"head {h}", _line(bias[:, h])) for h in range(min(3, n_heads))],
              note="one scalar per (bucket, head); untrained"),
        Panel(("past max_distance: one shared bucket", "超过最大距离：共用一个桶"), "distance into the past",
              "bucket (decoder)", x=pos.tolist(), series=[("unidirectional", [float(v) for v in past])],
              vline=max_distance, note=f"every distance >= max_distance={max_distance} lands in bucket {buckets - 1}"),
        note=f"H={n_heads}, {buckets} buckets, max_distance={max_distance} (= --train-len); computed by t5_bucket",
    )


_PE_BUILDERS = {"sinusoidal": _pe_sinusoidal, "learned": _pe_learned, "rope": _pe_rope, "alibi": _pe_alibi,
                "t5": _pe_t5}


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
                im = ax.imshow(img.numpy(), aspect="auto", cmap=cmap if vmin < 0 else "viridis", vmin=vmin,
                               vmax=lim, interpolation="nearest")
                fig.colorbar(im, ax=ax, shrink=0.85)
                if panel.hline is not None:
                    ax.axhline(panel.hline, color="k", lw=1, ls="--")
                    ax.text(0.01, panel.hline, "training length", va="bottom", fontsize=7, color="k",
                            transform=ax.get_yaxis_transform(), bbox={"facecolor": "white", "alpha": 0.8, "lw": 0})
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


# --------------------------------------------------------------------------------------------------- masks


def mask_examples(seq: int = 8, pad: int = 3, window: int | None = None) -> dict[str, torch.Tensor]:
    """Four ``(T, S)`` masks of one padded sequence (True = may attend), built by ``components.masks``; a fifth,
    the causal sliding-window band, when ``window`` is given."""
    if not isinstance(seq, int) or not 2 <= seq <= 64:
        raise ValueError(f"--seq must be an integer in [2, 64], got {seq!r}")
    if not isinstance(pad, int) or not 1 <= pad < seq:
        raise ValueError(f"--pad must be an integer in [1, --seq={seq}), got {pad!r}")
    if window is not None and (not isinstance(window, int) or not 1 <= window <= seq):
        raise ValueError(f"--window must be an integer in [1, --seq={seq}], got {window!r}")
    right = padding_mask([seq - pad], seq)  # (1, S): real tokens first
    left = right.flip(-1)  # (1, S): padding first
    causal = causal_mask(seq)  # (T, S)

    def as_ts(key_padding: torch.Tensor) -> torch.Tensor:
        return key_padding_to_attention(key_padding)[0, 0].expand(seq, seq)  # (T, S)

    real = seq - pad
    out = {
        f"padding ({real} tokens, then {pad} pads)": as_ts(right),
        "causal": causal,
        "padding & causal": combine(as_ts(right), causal),
        f"left padding ({pad} pads first) & causal": combine(as_ts(left), causal),
    }
    if window is not None:
        out[f"sliding window {window} (causal)"] = sliding_window_mask(seq, seq, window)
    return out


_FILLS = (("-inf", lambda dt: float("-inf")), ("finfo.min", lambda dt: torch.finfo(dt).min),
          ("-1e9", lambda dt: -1e9), ("-1e4", lambda dt: -1e4))
FILL_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
FILL_COLUMNS = ("fill", "dtype", "stored as", "scores.masked_fill", "hidden weight", "hidden weight, logit 1e4",
                "fully masked row", "two masks added")
_SCORES = (2.0, 1.0, 0.5, 1.5, 3.0)  # the last two keys are hidden
_KEEP = (True, True, True, False, False)


def _describe_hidden(w: torch.Tensor, keep: torch.Tensor) -> str:
    if w.isnan().any():
        return "NaN"
    leak = float(w[~keep].float().max())
    return "0 (exact)" if leak == 0.0 else f"leak {leak:.1e}"


def _describe_row(w: torch.Tensor) -> str:
    """A row whose every key is hidden: NaN, zeros, uniform, or the unmasked softmax showing through."""
    if w.isnan().any():
        return "NaN"
    w = w.float()
    if float(w.abs().max()) == 0.0:
        return "0 (no NaN)"
    n = w.numel()
    if bool((w - 1.0 / n).abs().max() < 1e-3):
        return f"uniform 1/{n} (leak)"
    if bool((w - torch.tensor(_SCORES).softmax(-1)).abs().max() < 1e-3):
        return "softmax(scores): mask cancels"
    return "weights " + ", ".join(f"{float(v):.2g}" for v in w)


def fill_value_table() -> list[dict[str, str]]:
    """What each fill value does to softmax in each dtype, computed now (additive masks, softmax in that dtype).

    Rows: fill × dtype, then anatomy's own rule (boolean mask, -inf, empty rows → 0) for reference. Columns:
    the fill stored in the dtype (overflow shows as -inf); whether ``scores.masked_fill(~keep, fill)`` works;
    the largest weight on a hidden key of an ordinary row, and of a row whose hidden key has a raw logit near
    1e4 (large unscaled scores); a row with every key hidden; a fully hidden row when two additive masks
    (padding + causal) are summed.
    """
    keep = torch.tensor(_KEEP)
    none = torch.zeros_like(keep)
    rows = []
    for label, make in _FILLS:
        for dt in FILL_DTYPES:
            fill = make(dt)
            stored = torch.tensor(fill, dtype=dt)
            stored_text = f"{float(stored):.4g}"
            if math.isinf(float(stored)) and math.isfinite(fill):
                stored_text += " (overflow)"
            elif math.isfinite(fill) and float(stored) != fill:
                stored_text += " (rounded)"
            scores = torch.tensor(_SCORES, dtype=dt)
            try:
                scores.masked_fill(~keep, fill)
                masked_fill = "ok"
            except RuntimeError as err:
                masked_fill = "RuntimeError: overflow" if "overflow" in str(err) else f"RuntimeError: {err}"[:40]

            def additive(k: torch.Tensor, dt=dt, fill=fill) -> torch.Tensor:  # 0 where kept, fill (in dt) elsewhere
                return torch.where(k, torch.zeros((), dtype=dt), torch.tensor(fill, dtype=dt))

            big = torch.tensor((2.0, 1.0, 0.5, 9990.0, 1.5), dtype=dt)
            rows.append({
                "fill": label, "dtype": str(dt).removeprefix("torch."), "stored as": stored_text,
                "scores.masked_fill": masked_fill,
                "hidden weight": _describe_hidden((scores + additive(keep)).softmax(-1), keep),
                "hidden weight, logit 1e4": _describe_hidden((big + additive(keep)).softmax(-1), keep),
                "fully masked row": _describe_row((scores + additive(none)).softmax(-1)),
                "two masks added": _describe_row((scores + additive(none) + additive(none)).softmax(-1)),
            })
    for dt in FILL_DTYPES:  # our kernels: boolean mask, -inf, softmax in float32, empty rows zeroed
        def ours(scores: torch.Tensor, k: torch.Tensor, dt=dt) -> torch.Tensor:
            q, key = torch.zeros(1, 1, 1, 1, dtype=dt), torch.zeros(1, 1, scores.numel(), 1, dtype=dt)
            _, w = math_attention(q, key, key, mask=k[None, None, None], scale=1.0,
                                  bias=scores.to(dt)[None, None, None], need_weights=True)
            return w[0, 0, 0]

        scores = torch.tensor(_SCORES, dtype=dt)
        big = torch.tensor((2.0, 1.0, 0.5, 9990.0, 1.5), dtype=dt)
        rows.append({
            "fill": "anatomy: bool mask", "dtype": str(dt).removeprefix("torch."), "stored as": "-inf",
            "scores.masked_fill": "ok", "hidden weight": _describe_hidden(ours(scores, keep), keep),
            "hidden weight, logit 1e4": _describe_hidden(ours(big, keep), keep),
            "fully masked row": _describe_row(ours(scores, none)),
            "two masks added": _describe_row(ours(scores, combine(none, none))) + " (AND, not +)",
        })
    return rows


def format_table(rows: list[dict[str, str]], columns: Sequence[str] = FILL_COLUMNS) -> str:
    widths = [max(len(c), *(len(r[c]) for r in rows)) for c in columns]
    line = "  ".join(c.ljust(w) for c, w in zip(columns, widths))
    out = [line, "-" * len(line)]
    out += ["  ".join(r[c].ljust(w) for c, w in zip(columns, widths)).rstrip() for r in rows]
    return "\n".join(out)


def mask_figure(masks: dict[str, torch.Tensor], table: list[dict[str, str]]):
    """The masks as grids (allowed / hidden), fully hidden rows marked, and the fill-value table below."""
    from matplotlib.colors import ListedColormap

    cmap = ListedColormap(["#e8e8e8", "#2b6cb0"])
    with _fonts():
        fig = new_figure(figsize=(17, 9.5), layout="constrained")
        grid = fig.add_gridspec(2, len(masks), height_ratios=[1, 1])
        for i, (name, mask) in enumerate(masks.items()):
            ax = fig.add_subplot(grid[0, i])
            t, s = mask.shape
            ax.imshow(mask.numpy(), cmap=cmap, vmin=0, vmax=1, interpolation="nearest")
            ax.set_xticks(range(s), [str(j) for j in range(s)], fontsize=7)
            ax.set_yticks(range(t), [str(j) for j in range(t)], fontsize=7)
            ax.set_xticks([x - 0.5 for x in range(1, s)], minor=True)
            ax.set_yticks([y - 0.5 for y in range(1, t)], minor=True)
            ax.grid(which="minor", color="white", lw=1)
            ax.tick_params(which="minor", length=0)
            ax.set_xlabel(bi("key j", "键"))
            ax.set_ylabel(bi("query i", "查询"))
            empty = (~mask.any(-1)).nonzero().flatten().tolist()
            for r in empty:
                ax.add_patch(_rect(r, s))
                ax.text(s - 0.4, r, bi(" no key → weights 0", " 无可见键 → 0"), color="#c53030", fontsize=7,
                        va="center", ha="left", clip_on=False)
            title = name + (f"\n{len(empty)} fully masked row(s)" if empty else "\n")
            ax.set_title(title, fontsize=10)
        ax = fig.add_subplot(grid[1, :])
        ax.axis("off")
        cells = [[r[c] for c in FILL_COLUMNS] for r in table]
        tab = ax.table(cellText=cells, colLabels=list(FILL_COLUMNS), loc="upper center", cellLoc="left")
        tab.auto_set_font_size(False)
        tab.set_fontsize(8)
        tab.scale(1, 1.25)
        for (row, _col), cell in tab.get_celld().items():
            text = cell.get_text().get_text()
            if row == 0:
                cell.set_facecolor("#edf2f7")
            elif text.startswith("0 (") or text == "ok":
                cell.set_facecolor("#e6f4ea")
            elif "NaN" in text or "RuntimeError" in text or "overflow" in text:
                cell.set_facecolor("#fed7d7")
            elif "leak" in text or "cancels" in text or "rounded" in text:
                cell.set_facecolor("#feebc8")
        tab.auto_set_column_width(list(range(len(FILL_COLUMNS))))
        ax.set_title(bi("what each fill value does to softmax (computed now; additive masks, softmax in each dtype)",
                        "不同填充值对 softmax 的影响（现场计算）"), fontsize=11)
        fig.suptitle(bi("Masks: True (blue) = may attend", "掩码：蓝色 = 可以关注"), fontsize=13)
        fig.text(0.0, -0.01, f"scores {_SCORES}, last two keys hidden; 'logit 1e4': a hidden key with raw score 9990; "
                 "'two masks added': padding + causal additive masks summed on a fully hidden row (HF PR #27114)",
                 fontsize=8, va="top", color="#444")
    return fig


def _rect(row: int, s: int):
    from matplotlib.patches import Rectangle

    return Rectangle((-0.5, row - 0.5), s, 1, fill=False, edgecolor="#c53030", lw=2)
