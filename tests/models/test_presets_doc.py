"""docs/presets.md says what the presets are: both tables checked against ``PRESETS`` and against a built model."""

from __future__ import annotations

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
    for line in lines[start + 1:]:
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
    weights = {k: torch.cat([p.detach().flatten() for n, p in model.named_parameters() if n.endswith(k)])
               for k in ("up_proj.weight", "o_proj.weight", "down_proj.weight")}
    residual = 0.02 / math.sqrt(2 * _depth(PRESETS[name]))
    assert weights["up_proj.weight"].std().item() == pytest.approx(0.02, rel=0.03)
    assert weights["o_proj.weight"].std().item() == pytest.approx(residual, rel=0.03)
    assert weights["down_proj.weight"].std().item() == pytest.approx(residual, rel=0.03)
