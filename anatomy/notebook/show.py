"""The pictures and tables inside Jupyter: each call returns an object that displays itself.

    from anatomy.notebook import show
    show.attention("小明把球传给了小红")            # the heads of layer 0 of a seed-block model (random weights)
    show.pe("rope")                                # table, waves, similarity, past the training length
    show.mask(seq=8, pad=3)                        # padding / causal / combined masks and the fill-value table
    show.trace(preset="llama")                     # the post's §5.1 table of one of our models
    show.claims("claims-out/claims.json")          # the claims lab's verdicts
    show.figure(fig)                               # any matplotlib Figure, drawn with the Chinese font

The figures are matplotlib ``Figure`` objects drawn without pyplot (``anatomy.inspection.viz``); :class:`Picture`
gives them ``_repr_png_`` under the project's fonts (DejaVu Sans, falling back per glyph to an installed CJK font,
or code points with the hint when there is none), and ``save(path)``. In a terminal their ``repr`` says what they
are and how to save them.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Picture:
    fig: Any  # matplotlib.figure.Figure
    title: str = ""
    notes: list[str] = field(default_factory=list)  # printed under the picture (the CLI prints them too)

    def png(self) -> bytes:
        from anatomy.inspection.figures import _fonts

        buf = io.BytesIO()
        with _fonts():
            self.fig.savefig(buf, format="png", dpi=96, bbox_inches="tight")
        return buf.getvalue()

    def save(self, path: str | Path) -> str:
        from anatomy.inspection.figures import save_figure

        return save_figure(self.fig, path)

    def _repr_png_(self) -> bytes:
        return self.png()

    def _repr_markdown_(self) -> str | None:
        return None if not self.notes else "\n\n".join(self.notes)

    def __repr__(self) -> str:
        extra = "".join(f"\n{n}" for n in self.notes)
        return f"<{self.title or 'figure'}: displays in Jupyter; .save('x.png') writes it>{extra}"


def figure(fig: Any, title: str = "") -> Picture:
    """Any matplotlib ``Figure`` as a :class:`Picture` (drawn with the Chinese font)."""
    return Picture(fig, title)


def _cjk_notes(text: str) -> list[str]:
    from anatomy.inspection.figures import cjk_font, cjk_hint, needs_cjk

    return [cjk_hint()] if needs_cjk(text) and not cjk_font() else []


def attention(
    text: str = "小明把球传给了小红他跑得很快",
    *,
    model: Any = None,
    preset: str = "seed-block",
    layer: int = 0,
    heads: list[int] | None = None,
    seed: int = 0,
) -> Picture:
    """``anatomy viz attention``: one layer's heads on ``text`` (one token per character), entropy in each title.
    ``model``: one of ours (default: ``preset`` with random weights, seed ``seed``)."""
    import torch

    from anatomy.config import ModelConfig
    from anatomy.inspection import viz
    from anatomy.inspection.weights import attention_modules, attention_weights
    from anatomy.models import build_model

    if model is None:
        torch.manual_seed(seed)
        model = build_model(ModelConfig.from_preset(preset)).eval()
        origin = f"preset {preset}, random weights (seed {seed})"
    else:
        origin = type(model).__name__
    config = model.config
    modules = attention_modules(model)
    if not 0 <= layer < len(modules):
        raise ValueError(
            f"layer {layer}: the model has {len(modules)} attention layer(s), numbered 0..{len(modules) - 1}"
        )
    name, module = modules[layer]
    heads = list(range(module.n_heads)) if heads is None else heads
    bad = [h for h in heads if not 0 <= h < module.n_heads]
    if bad:
        raise ValueError(f"heads {bad}: layer {layer} has {module.n_heads} heads, numbered 0..{module.n_heads - 1}")
    tokens, ids = viz.char_tokens(text, config.vocab_size)  # ids (1, T)
    if ids.shape[1] > config.max_seq_len:
        raise ValueError(f"text has {ids.shape[1]} tokens, longer than max_seq_len={config.max_seq_len}")
    inputs = {"input_ids": ids}
    if config.architecture == "seq2seq":
        inputs["decoder_input_ids"] = ids
    with torch.no_grad(), attention_weights(model, layers=[layer], heads=heads) as maps:
        model(**inputs)
    weights = maps[layer]
    note = f"{viz.TOKENIZER_NOTE.format(vocab=config.vocab_size)}; {origin}"
    fig = viz.attention_figure(weights, tokens, title=f"layer {layer} ({name})", note=note)
    return Picture(fig, f"attention · layer {layer}", _cjk_notes(text))


def pe(
    kind: str = "sinusoidal", *, d_model: int = 64, max_len: int = 128, train_len: int = 64, n_heads: int = 8
) -> Picture:
    """``anatomy viz pe``: a positional encoding's table, waves, similarity and behaviour past training."""
    from anatomy.inspection import viz_pe

    viz_pe.check_pe_args(kind, d_model, max_len, train_len, n_heads)
    data = viz_pe.positional_data(kind, d_model=d_model, max_len=max_len, train_len=train_len, n_heads=n_heads)
    return Picture(viz_pe.positional_figure(data), f"positional encoding · {kind}")


def mask(seq: int = 8, pad: int = 3, window: int | None = None) -> Picture:
    """``anatomy viz mask``: the masks drawn (fully-masked rows marked) and what fill values do to softmax."""
    from anatomy.inspection import viz_masks

    table = viz_masks.fill_value_table()
    fig = viz_masks.mask_figure(viz_masks.mask_examples(seq, pad, window), table)
    return Picture(fig, "masks", ["```text\n" + viz_masks.format_table(table) + "\n```"])


@dataclass
class ModelTrace:
    rows: list[Any]
    title: str

    def text(self, fmt: str = "table") -> str:
        from anatomy.inspection.trace import render

        return render(self.rows, fmt, title=self.title)

    def __repr__(self) -> str:
        return self.text()

    def _repr_html_(self) -> str:
        from anatomy.notebook.display import model_trace_html

        return model_trace_html(self.rows, self.title)


def trace(model: Any = None, *, preset: str = "seed-block", batch: int = 2, seq: int = 10) -> ModelTrace:
    """``anatomy trace --preset NAME``: the shape of every step of a real forward pass of one of our models."""
    import torch

    from anatomy.config import ModelConfig
    from anatomy.inspection.trace import example_inputs, trace_model
    from anatomy.models import build_model

    if model is None:
        torch.manual_seed(0)
        model = build_model(ModelConfig.from_preset(preset)).eval()
    rows = trace_model(model, example_inputs(model, batch, seq))
    c = model.config
    title = (
        f"anatomy trace · {c.architecture}, D={c.d_model}, H={c.n_heads}, Dh={c.dh}, layers={c.n_layers}, "
        f"norm={c.norm_position}"
    )
    return ModelTrace(rows, title)


@dataclass
class Claims:
    doc: dict[str, Any]
    lang: str = "en"

    def __repr__(self) -> str:
        from anatomy.experiments.report import render_markdown

        return render_markdown(self.doc, self.lang)

    def _repr_html_(self) -> str:
        from anatomy.notebook.display import claims_html

        return claims_html(self.doc, self.lang)


def claims(doc: dict[str, Any] | str | Path, lang: str = "en") -> Claims:
    """The claims lab's verdicts: ``run_claims``'s return value, or the path of its ``claims.json``."""
    if isinstance(doc, (str, Path)):
        path = Path(doc)
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError) as err:  # RecursionError: nested past the parser
            raise ValueError(f"claims: cannot read {str(path)!r} as claims.json ({err})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("claims"), list):
        raise ValueError("claims: expected the claims lab's document (a dict with a 'claims' list)")
    return Claims(doc, lang)
