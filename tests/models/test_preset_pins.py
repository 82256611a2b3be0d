"""Every preset's outputs, pinned: component work (new options for more Hugging Face families, speed levers) must
not move what an existing preset computes.

Each preset is shrunk to a small size, built from a fixed seed (so the random initialisation, which depends on the
order modules create their parameters, is pinned too) and run on fixed, padded token ids; the first 16 columns of
its logits (or hidden states) and the sum and absolute sum of the whole output are compared with
``data/preset_pins.json``, written once, before the components changed, by ``python tests/models/test_preset_pins.py
--write``. The tolerance (1e-5 of the magnitude pinned, ``pin_tolerance.py``) allows another CPU's float rounding,
not a changed computation.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from pin_tolerance import assert_matches_summary

from anatomy import PRESETS, ModelConfig, build_model

PINS = Path(__file__).parent / "data" / "preset_pins.json"
SMALL = dict(vocab_size=48, d_model=32, n_heads=4, n_layers=2, d_ff=64, max_seq_len=32)


def _config(preset: str) -> ModelConfig:
    if preset == "seed-block":  # already the post's tiny worked example
        return ModelConfig.from_preset(preset)
    kv = {"n_kv_heads": 2} if preset in ("llama", "qwen3") else {}
    heads = {"head_dim": 16} if preset == "qwen3" else {}
    return ModelConfig.from_preset(preset, **{**SMALL, **kv, **heads})


def outputs(preset: str) -> torch.Tensor:
    config = _config(preset)
    torch.manual_seed(0)
    model = build_model(config).eval()
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(1, config.vocab_size, (2, 8), generator=g)
    mask = torch.ones(2, 8, dtype=torch.long)
    with torch.no_grad():
        if config.architecture == "decoder_lm":
            mask[1, :3] = 0  # left padding
            return model(ids.masked_fill(mask == 0, 0), mask).logits
        mask[1, 5:] = 0  # right padding
        if config.architecture == "seq2seq":
            return model(ids, mask, decoder_input_ids=torch.randint(1, config.vocab_size, (2, 5), generator=g)).logits
        out = model(ids, mask)
        return out.logits if hasattr(out, "logits") else out.last_hidden_state


def _summary(t: torch.Tensor) -> dict:
    return {
        "shape": list(t.shape),
        "head": t[..., :16].flatten().tolist(),
        "sum": t.sum().item(),
        "abs_sum": t.abs().sum().item(),
    }


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_preset_outputs_are_unchanged(preset):
    pins = json.loads(PINS.read_text())
    assert preset in pins, f"no pin for preset {preset!r}: run python {__file__} --write on the old components"
    pin, now = pins[preset], outputs(preset)
    assert_matches_summary(now, now[..., :16].flatten(), pin, preset)
    assert now.abs().max() > 0.01  # a real output, not zeros


if __name__ == "__main__":
    if "--write" not in sys.argv:
        raise SystemExit(f"usage: python {sys.argv[0]} --write   (overwrites {PINS})")
    PINS.write_text(json.dumps({p: _summary(outputs(p)) for p in sorted(PRESETS)}, indent=1) + "\n")
    print(f"wrote {PINS}")
