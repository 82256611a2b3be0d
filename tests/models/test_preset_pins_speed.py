"""Outputs of every preset pinned before the speed work (issue 14): a change to components that is meant to keep
results exact must reproduce them.

Each preset is built at explicit small sizes (every size given, so the preset-derivation rules do not move them)
with a fixed seed; the pins are its outputs with and without padding, its attention weights, its loss and the
norm of every parameter's gradient. They were written by ``python tests/models/test_preset_pins_speed.py --write``
on the commit before any component changed; on the machine that wrote them the match is bit for bit (another CPU
may round a float32 matmul differently, hence a tolerance relative to the magnitude pinned, ``pin_tolerance.py``).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from pin_tolerance import assert_close_to_magnitude

from anatomy import PRESETS, ModelConfig, build_model

PINS = Path(__file__).parent / "data" / "preset_pins.pt"
SIZES = dict(vocab_size=40, d_model=32, n_heads=4, n_layers=2, d_ff=48, max_seq_len=32)


def config(preset: str) -> ModelConfig:
    extra = {"n_kv_heads": 2} if preset in ("llama", "qwen3") else {}
    if preset == "qwen3":
        extra["head_dim"] = 8
    if preset == "seed-block":
        extra["n_layers"] = 1
    return ModelConfig.from_preset(preset, **{**SIZES, **extra}, dropout=0.0, attention_dropout=0.0)


def outputs(preset: str) -> dict[str, torch.Tensor]:
    torch.manual_seed(1234)
    model = build_model(config(preset))
    g = torch.Generator().manual_seed(99)
    ids = torch.randint(1, 40, (2, 7), generator=g)
    tgt = torch.randint(1, 40, (2, 5), generator=g)
    mask = torch.ones(2, 7, dtype=torch.long)
    mask[1, :2] = 0  # left padding on the second row
    arch = model.config.architecture
    out: dict[str, torch.Tensor] = {}

    def run(**kw):
        if arch == "seq2seq":
            return model(ids, labels=tgt, **kw)
        if arch == "decoder_lm":
            return model(ids, labels=ids, **kw)
        if arch == "classifier":
            return model(ids, labels=torch.tensor([0, 1]), **kw)
        return model(ids, **kw)

    model.eval()
    with torch.no_grad():
        plain = run()
        out["main"] = plain.logits if hasattr(plain, "logits") else plain.last_hidden_state
        padded = run(attention_mask=mask)
        out["padded"] = padded.logits if hasattr(padded, "logits") else padded.last_hidden_state
        weighted = run(output_attentions=True)
        attn = (
            weighted.attentions
            if hasattr(weighted, "attentions") and weighted.attentions is not None
            else weighted.encoder_attentions
        )
        out["weights"] = torch.stack(list(attn))
    model.train()
    result = run()
    if getattr(result, "loss", None) is None:
        loss = result.last_hidden_state.pow(2).mean()
    else:
        loss = result.loss
    loss.backward()
    out["loss"] = loss.detach()
    out["grad_norms"] = torch.stack([p.grad.norm() for _, p in sorted(model.named_parameters()) if p.grad is not None])
    return out


PINNED = ("bert", "gpt2", "llama", "qwen3", "seed-block", "t5", "vaswani-2017")  # every preset when pinned


def test_every_preset_of_the_time_is_pinned():
    assert sorted(torch.load(PINS)) == list(PINNED)
    assert set(PINNED) <= set(PRESETS)


@pytest.mark.parametrize("preset", PINNED)
def test_outputs_match_the_pins_taken_before_the_speed_work(preset):
    pins = torch.load(PINS)
    now = outputs(preset)
    assert set(now) == set(pins[preset])
    for name, want in pins[preset].items():
        got = now[name]
        assert got.shape == want.shape, name
        assert_close_to_magnitude(got, want, f"{preset} {name}")


def test_the_pins_can_fail():
    """The pinned numbers are specific: a different seed's model does not match them."""
    pins = torch.load(PINS)["gpt2"]
    torch.manual_seed(4321)
    other = build_model(config("gpt2")).eval()
    ids = torch.randint(1, 40, (2, 7), generator=torch.Generator().manual_seed(99))
    with torch.no_grad():
        assert not torch.allclose(other(ids).logits, pins["main"], rtol=1e-5, atol=1e-6)


if __name__ == "__main__" and "--write" in sys.argv:
    PINS.parent.mkdir(exist_ok=True)
    torch.save({p: outputs(p) for p in sorted(PRESETS)}, PINS)
    print(f"wrote {PINS}")
