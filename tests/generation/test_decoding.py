"""The prefill and the decode steps ask the LM head for the one position they read (``logits_to_keep=1``)."""

from __future__ import annotations

import pytest
import torch

from anatomy import ModelConfig, build_model
from anatomy.generation import generate
from anatomy.models import lm, seq2seq


def _model(architecture: str):
    torch.manual_seed(0)
    cfg = ModelConfig.from_preset(
        "gpt2" if architecture == "decoder_lm" else "t5", vocab_size=40, d_model=16, n_heads=2, n_layers=1, d_ff=32
    )
    return build_model(cfg).eval()


@pytest.mark.parametrize("fast", [True, False], ids=["flat view", "modules"])
@pytest.mark.parametrize("architecture, module", [("decoder_lm", lm), ("seq2seq", seq2seq)])
def test_prefill_and_steps_keep_only_the_last_position(monkeypatch, architecture, module, fast):
    model = _model(architecture)
    ids = torch.randint(1, 40, (2, 9), generator=torch.Generator().manual_seed(1))
    want = generate(model, ids, max_new_tokens=4, fast=fast)
    asked = []
    real = module.keep_positions

    def spy(hidden, logits_to_keep):
        kept = real(hidden, logits_to_keep)
        asked.append((hidden.shape[1], logits_to_keep, kept.shape[1]))
        return kept

    monkeypatch.setattr(module, "keep_positions", spy)
    assert torch.equal(generate(model, ids, max_new_tokens=4, fast=fast), want)
    first = 9 if architecture == "decoder_lm" else 1  # the prompt, or the decoder's start token
    assert asked[0] == (first, 1, 1)  # the prefill: T positions in, the head reads one
    assert len(asked) >= 4 and all(keep == 1 and kept == 1 for _, keep, kept in asked)


def test_prefill_logits_equal_the_full_forwards_last_row():
    """What the head computes for the kept row is the full forward's last row (float32 round-off at most)."""
    model = _model("decoder_lm")
    ids = torch.randint(1, 40, (2, 9), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        full = model(ids).logits[:, -1:]
        kept = model(ids, logits_to_keep=1).logits
    assert kept.shape == (2, 1, 40)
    torch.testing.assert_close(kept, full, atol=1e-6 * full.abs().max().item(), rtol=0)
