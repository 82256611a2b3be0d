"""Outputs pinned before the forward path was rebuilt (issue 24): decoding, every fault of the bug zoo, and
standalone attention calls through every kernel with every kind of mask. Every preset's logits are pinned in
test_preset_pins.py; this file pins what that one does not reach.

``data/pinned.json`` was written once, on the old forward path, by ``python tests/models/test_pinned.py --write``.
Tokens must be identical; floats agree within 1e-5 of the magnitude pinned (``pin_tolerance.py``: another CPU's
rounding, not a changed computation).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from pin_tolerance import assert_matches_summary

from anatomy import PRESETS, ModelConfig, build_model, pitfalls
from anatomy.components.attention import MultiHeadAttention
from anatomy.components.inputs import attention_inputs
from anatomy.components.kv_cache import KVCache
from anatomy.generation import generate

PINS = Path(__file__).parent / "data" / "pinned.json"
SMALL = dict(vocab_size=48, d_model=32, n_heads=4, n_layers=2, d_ff=64, max_seq_len=32)

DECODERS = {
    "gpt2": ("gpt2", {}),
    "llama": ("llama", dict(n_kv_heads=2)),
    "qwen3": ("qwen3", dict(n_kv_heads=2, head_dim=16)),
    "llama-window": ("llama", dict(n_kv_heads=2, sliding_window=3)),
    "gpt2-alibi-math": ("gpt2", dict(positional="alibi", kernel="math")),
}


def _model(preset: str, **overrides):
    torch.manual_seed(0)
    model = build_model(ModelConfig.from_preset(preset, **{**SMALL, **overrides}))
    with torch.no_grad():
        for p in model.parameters():  # peaked logits, so greedy tokens are not decided by round-off
            p.add_(0.3 * torch.randn_like(p))
    return model.eval()


def _ids(vocab: int = 48, b: int = 2, t: int = 8, left_pad: int = 3):
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(1, vocab, (b, t), generator=g)
    mask = torch.ones(b, t, dtype=torch.long)
    mask[1, :left_pad] = 0
    return ids.masked_fill(mask == 0, 0), mask


def decode_tokens(name: str, fast: bool) -> list:
    preset, overrides = DECODERS[name]
    model = _model(preset, **overrides)
    ids, mask = _ids()
    return generate(model, ids, mask, max_new_tokens=10, fast=fast).tolist()


def fault_output(fault: str, preset: str) -> torch.Tensor:
    model = _model(preset, **({"n_kv_heads": 2} if preset == "llama" else {}))
    ids, mask = _ids()
    if preset == "bert":
        mask = torch.ones_like(mask)
        mask[1, 5:] = 0  # right padding
    with torch.no_grad(), pitfalls.inject(model, fault):
        out = model(ids, mask)
    return out.logits if hasattr(out, "logits") else out.last_hidden_state


ATTENTION_CASES = ("self", "causal", "padding", "causal+padding", "window", "mask3d", "cache", "cross")


def attention_output(kernel: str, case: str) -> torch.Tensor:
    torch.manual_seed(0)
    window = 3 if case == "window" else None
    attn = MultiHeadAttention(d_model=16, n_heads=4, n_kv_heads=2, kernel=kernel, sliding_window=window).eval()
    g = torch.Generator().manual_seed(2)
    x = torch.randn(2, 6, 16, generator=g)
    padding = torch.ones(2, 6, dtype=torch.bool)
    padding[1, :2] = False
    with torch.no_grad():
        if case == "self":
            return attn(x)[0]
        if case == "causal":
            return attn(x, ctx=attention_inputs(attn, x, is_causal=True))[0]
        if case == "padding":
            return attn(x, ctx=attention_inputs(attn, x, key_padding_mask=padding))[0]
        if case == "causal+padding":
            return attn(x, ctx=attention_inputs(attn, x, key_padding_mask=padding, is_causal=True))[0]
        if case == "window":
            return attn(x, ctx=attention_inputs(attn, x, is_causal=True))[0]
        if case == "mask3d":
            return attn(x, ctx=attention_inputs(attn, x, mask=torch.rand(2, 6, 6, generator=g) > 0.3, is_causal=True))[
                0
            ]
        if case == "cache":
            cache = KVCache()
            first = attn(
                x[:, :4], ctx=attention_inputs(attn, x[:, :4], is_causal=True, kv_cache=cache), kv_cache=cache
            )[0]
            rest = attn(x[:, 4:], ctx=attention_inputs(attn, x[:, 4:], is_causal=True, kv_cache=cache), kv_cache=cache)[
                0
            ]
            return torch.cat([first, rest], dim=1)
        memory = torch.randn(2, 5, 16, generator=g)
        return attn(x, ctx=attention_inputs(attn, x, memory, key_padding_mask=padding[:, :5]), context=memory)[0]


FAULT_PRESETS = ("gpt2", "llama", "bert")


def _summary(t: torch.Tensor) -> dict:
    return {
        "shape": list(t.shape),
        "head": t.flatten()[:24].tolist(),
        "sum": t.sum().item(),
        "abs_sum": t.abs().sum().item(),
    }


def _close(now: torch.Tensor, pin: dict) -> None:
    assert_matches_summary(now, now.flatten()[:24], pin)


def _pins() -> dict:
    return json.loads(PINS.read_text())


@pytest.mark.parametrize("name", list(DECODERS))
@pytest.mark.parametrize("fast", [True, False], ids=["fast", "modules"])
def test_decode_tokens_are_unchanged(name, fast):
    assert decode_tokens(name, fast) == _pins()["decode"][name]


@pytest.mark.parametrize("preset", FAULT_PRESETS)
@pytest.mark.parametrize("fault", sorted(pitfalls.FAULTS))
def test_fault_outputs_are_unchanged(fault, preset):
    _close(fault_output(fault, preset), _pins()["faults"][f"{fault}/{preset}"])


@pytest.mark.parametrize("case", ATTENTION_CASES)
@pytest.mark.parametrize("kernel", ["sdpa", "math", "loop"])
def test_standalone_attention_is_unchanged(kernel, case):
    _close(attention_output(kernel, case), _pins()["attention"][f"{kernel}/{case}"])


def parameter_order(preset: str) -> str:
    """A hash of the parameters' and the state_dict's names in order: building parts elsewhere must not reorder
    them (the order decides what a seeded random initialisation gives each parameter)."""
    import hashlib

    from test_preset_pins import _config

    model = build_model(_config(preset))
    names = [n for n, _ in model.named_parameters()] + ["|"] + list(model.state_dict())
    return hashlib.sha256("\n".join(names).encode()).hexdigest()


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_parameter_and_state_dict_order_is_unchanged(preset):
    assert parameter_order(preset) == _pins()["parameter_order"][preset]


def _write() -> None:
    decode = {}
    for name in DECODERS:
        tokens = decode_tokens(name, fast=True)
        assert tokens == decode_tokens(name, fast=False), name
        decode[name] = tokens
    faults = {f"{f}/{p}": _summary(fault_output(f, p)) for f in sorted(pitfalls.FAULTS) for p in FAULT_PRESETS}
    attention = {
        f"{k}/{c}": _summary(attention_output(k, c)) for k in ("sdpa", "math", "loop") for c in ATTENTION_CASES
    }
    order = {p: parameter_order(p) for p in sorted(PRESETS)}
    PINS.write_text(
        json.dumps({"decode": decode, "faults": faults, "attention": attention, "parameter_order": order}, indent=0)
        + "\n"
    )
    print(f"wrote {PINS}")


if __name__ == "__main__":
    if "--write" not in sys.argv:
        raise SystemExit(f"usage: python {sys.argv[0]} --write   (overwrites {PINS})")
    _write()
