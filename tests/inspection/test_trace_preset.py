"""``anatomy trace --preset``: the model is built on the meta device, so a large preset shows its real shapes
without its memory (issue 24, loose end of item 8: qwen3 once built a 2 GB model for a table of shapes)."""

from __future__ import annotations

import json

import torch

from anatomy.cli import trace as trace_cmd
from anatomy.cli.main import main
from anatomy.config import ModelConfig


def test_trace_preset_qwen3_builds_nothing_real_and_shows_the_real_shapes(capsys, monkeypatch):
    built = []
    real_build = trace_cmd.build_model
    monkeypatch.setattr(trace_cmd, "build_model", lambda config: built.append(real_build(config)) or built[-1])
    assert main(["trace", "--preset", "qwen3", "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    config = ModelConfig.from_preset("qwen3")
    model = built[-1]
    assert all(p.is_meta for p in model.parameters()), "every parameter stays on the meta device: no memory"
    assert sum(p.numel() for p in model.parameters()) > 4e8  # the real model's size, counted not allocated
    shapes = {r["kind"]: r["shape"] for r in rows}
    assert shapes["head"] == [2, 10, config.vocab_size] == [2, 10, 151936]
    assert shapes["embed"] == [2, 10, config.d_model]
    assert shapes["scores"] == [2, config.n_heads, 10, 10]
    assert shapes["hidden"] == [2, 10, config.d_ff]
    split_k = next(r for r in rows if r["kind"] == "split" and "k" in r["operation"].split()[-1])
    assert split_k["shape"] == [2, config.kv_heads, 10, config.dh]
    assert rows[0]["params"] == config.vocab_size * config.d_model  # the embedding's real parameter count
    assert len([r for r in rows if r["kind"] == "scores"]) == config.n_layers


def test_a_meta_forward_skips_only_the_value_checks(capsys):
    """Real inputs are still checked: the meta exemption is for a shapes-only forward."""
    from anatomy import build_model

    model = build_model(ModelConfig.from_preset("gpt2", vocab_size=10, d_model=16, n_heads=2, n_layers=1))
    try:
        model(torch.tensor([[3, 12]]))
    except ValueError as err:
        assert "input_ids" in str(err)
    else:
        raise AssertionError("an id past the vocabulary must be refused")
    with torch.device("meta"):
        meta = build_model(model.config)
    assert meta(torch.tensor([[3, 12]], device="meta")).logits.shape == (1, 2, 10)
