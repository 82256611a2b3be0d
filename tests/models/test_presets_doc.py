"""docs/presets.md says what the presets are: both tables checked against ``PRESETS`` and against a built model."""

from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path

import pytest
import torch

from anatomy.config import PRESETS, ModelConfig
from anatomy.models import build_model

DOC = Path(__file__).resolve().parents[2] / "docs" / "presets.md"
ARCHITECTURE = {"encoder-decoder": "seq2seq", "encoder": "encoder", "decoder-only LM": "decoder_lm"}
NORM = {"layernorm": "LayerNorm", "rmsnorm": "RMSNorm"}
ACTIVATION = {"relu": "ReLU", "gelu": "GELU", "gelu_tanh": "GELU (tanh approximation)", "swiglu": "SwiGLU"}


def _table(after: str) -> list[list[str]]:
    """The first Markdown table after the line ``after``, as rows of cells (the separator row left out)."""
    lines = DOC.read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(after))
    rows = []
    for line in lines[start + 1 :]:
        if not line.startswith("|"):
            if rows:
                break
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not set("".join(cells)) <= set("-: "):
            rows.append(cells)
    return rows


def _departures() -> dict[str, dict[str, str]]:
    header, *rows = _table("## Departures from")
    return {preset: {row[0]: row[i] for row in rows} for i, preset in enumerate(header) if i > 0}


def _depth(values: dict) -> int:
    config = ModelConfig(**values)
    return config.n_layers + (config.decoder_layers if config.architecture == "seq2seq" else 0)


def test_the_tables_name_every_preset():
    sizes = {row[0].strip("`") for row in _table("| preset |")}
    assert sizes == set(PRESETS) == set(_departures())


@pytest.mark.parametrize("row", _table("| preset |"), ids=lambda r: r[0].strip("`"))
def test_size_table_matches_the_preset(row):
    name, arch, size = row[0].strip("`"), row[1], row[2]
    p = ModelConfig.from_preset(name)
    assert ARCHITECTURE[arch.split(",")[0]] == p.architecture
    m = re.fullmatch(r"(\d+) / (\d+)(?: \((\d+) kv\))?(?: × (\d+))? / (\d+)(?:\+(\d+))? / (\d+)", size)
    assert m, size
    d, h, kv, dh, layers, dec, d_ff = (None if g is None else int(g) for g in m.groups())
    assert (d, h, layers, d_ff) == (p.d_model, p.n_heads, p.n_layers, p.d_ff)
    assert kv == p.n_kv_heads and dh == PRESETS[name].get("head_dim")
    assert (dec is not None) == (p.architecture == "seq2seq") and dec in (None, p.decoder_layers)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_departures_match_the_preset(name):
    cell = _departures()[name]
    p = ModelConfig.from_preset(name)
    assert cell["placement"].split(" ")[0] == p.norm_position
    assert ("+ final norm" in cell["placement"]) == p.use_final_norm
    assert cell["norm"].split(" ")[0] == NORM[p.norm]
    assert cell["activation"] == ACTIVATION[p.activation]
    assert cell["biases"] == ("yes" if p.bias else "none")
    assert float(cell["dropout"].split(" ")[0]) == p.dropout
    assert ("attention" in cell["dropout"]) == (p.attention_dropout > 0)
    if p.init == "xavier":
        assert cell["initialisation"] == "Xavier-uniform"
    else:
        assert p.init == "normal" and p.init_std == 0.02
        layers = "6 + 6" if p.architecture == "seq2seq" else str(p.n_layers)
        assert cell["initialisation"] == f"N(0, 0.02), residual projections / sqrt(2L), L = {layers}"
        assert eval(layers) == _depth(PRESETS[name])  # noqa: S307 (a sum of two digits from our own doc)


@pytest.mark.parametrize("name", sorted(n for n, p in PRESETS.items() if p.get("init") == "normal"))
def test_normal_init_is_what_the_table_says_in_a_built_model(name):
    """At the preset's depth (narrow widths), up_proj ~ N(0, 0.02) and o_proj / down_proj ~ N(0, 0.02 / sqrt(2L))."""
    small = dict(d_model=64, n_heads=4, d_ff=128, vocab_size=100, max_seq_len=64)
    if PRESETS[name].get("n_kv_heads"):
        small["n_kv_heads"] = 2
    if PRESETS[name].get("head_dim"):
        small["head_dim"] = 16
    torch.manual_seed(0)
    model = build_model(ModelConfig.from_preset(name, **small))
    weights = {
        k: torch.cat([p.detach().flatten() for n, p in model.named_parameters() if n.endswith(k)])
        for k in ("up_proj.weight", "o_proj.weight", "down_proj.weight")
    }
    residual = 0.02 / math.sqrt(2 * _depth(PRESETS[name]))
    assert weights["up_proj.weight"].std().item() == pytest.approx(0.02, rel=0.03)
    assert weights["o_proj.weight"].std().item() == pytest.approx(residual, rel=0.03)
    assert weights["down_proj.weight"].std().item() == pytest.approx(residual, rel=0.03)


def _number(x: float) -> str:
    """How the table writes a number: 10000, 1,000,000, 1e-6."""
    if x >= 1 and float(x).is_integer():
        return f"{int(x):,}" if x >= 100000 else str(int(x))
    return f"{x:.0e}".replace("e-0", "e-")


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_positional_row_matches_the_preset(name):
    cell, p = _departures()[name]["positional"], ModelConfig.from_preset(name)
    want = {
        "sinusoidal": "sinusoidal",
        "learned": f"learned absolute ({p.max_seq_len})",
        "rope": f"RoPE ({p.rope_layout} layout, base {_number(p.rope_base)})",
        "t5": f"bucketed relative bias ({p.t5_num_buckets} buckets, max {p.t5_max_distance})",
    }[p.positional]
    assert cell.startswith(want), (cell, want)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_norm_row_names_every_departure_of_the_norm(name):
    cell, p = _departures()[name]["norm"], ModelConfig.from_preset(name)
    default_eps = next(f.default for f in dataclasses.fields(ModelConfig) if f.name == "norm_eps")
    assert (f"eps {_number(p.norm_eps)}" in cell) == (p.norm_eps != default_eps), (cell, p.norm_eps)
    assert ("a norm on the embeddings" in cell) == p.embedding_norm
    assert ("QK-norm" in cell) == p.qk_norm
    if p.qk_norm:
        assert f"{NORM[p.qk_norm_kind]} over each head's {p.dh} dims" in cell


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_attention_row_matches_the_preset(name):
    cell, p = _departures()[name]["attention"], ModelConfig.from_preset(name)
    if p.n_kv_heads is None:
        assert cell.startswith("MHA")
    else:
        assert cell.startswith(f"GQA ({p.n_heads} query, {p.n_kv_heads} kv heads)")
    assert ("fused QKV" in cell) == p.fused_qkv
    assert ("**no** 1/sqrt(Dh) scale" in cell) == (p.attn_scale == 1.0)
    assert p.attn_scale in (None, 1.0)  # a row for any other scale is not written yet
    assert (f"of **{p.dh} dims each**" in cell) == (p.head_dim is not None and p.head_dim * p.n_heads != p.d_model)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_embeddings_row_matches_the_preset(name):
    cell, p = _departures()[name]["embeddings"], ModelConfig.from_preset(name)
    assert ("scaled by sqrt(D)" in cell) == p.scale_embeddings
    assert ("not scaled" in cell) == (not p.scale_embeddings and p.architecture not in ("decoder_lm", "seq2seq"))
    assert ("token types" in cell) == (p.type_vocab_size > 0)
    assert ("tied" in cell) == (p.tie_embeddings and p.architecture in ("decoder_lm", "seq2seq"))
    assert ("d_model^-0.5" in cell) == (p.output_scale != 1.0)
    if p.output_scale != 1.0:
        assert p.output_scale == pytest.approx(p.d_model**-0.5)
