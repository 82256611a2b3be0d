"""The Hugging Face families beyond the first seven, proven like them (tests/interop/test_hf.py): Llama with each
RoPE scaling (llama3, linear, dynamic, yarn), Qwen2, Gemma, Gemma 2, Phi-3 and GPT-NeoX.

Nothing is downloaded: every HF model is built from a tiny local config with random weights, perturbed so that
biases and norm gains are off their initial values. For each family: logits within 1e-5 of HF's (float32, eval,
left padding with HF's mask-derived position ids), greedy generation of 32 tokens identical to HF ``generate``,
and HF → ours → HF exact (every tensor equal, and the rebuilt HF model's logits equal the original's bit for bit,
so the config written back computes the same thing). Each family option is also shown to matter (switching it off
moves the logits), so the agreement is not an accident of a weak test.
"""

from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()

from anatomy import load_pretrained, save_pretrained  # noqa: E402
from anatomy.generation import generate  # noqa: E402
from anatomy.interop.hf import from_hf, to_hf  # noqa: E402

V, TOL = 100, 1e-5
BASE = dict(
    num_hidden_layers=2,
    hidden_size=32,
    num_attention_heads=4,
    num_key_value_heads=2,
    intermediate_size=64,
    vocab_size=V,
    max_position_embeddings=64,
)
LLAMA3 = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 32,
}  # with Dh=16: kept, blended and divided frequencies all occur


def _perturb(model, seed: int = 0, scale: float = 0.2):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(scale * torch.randn(p.shape, generator=g))
    return model.eval()


def _build(model_cls, config_cls, **kw):
    torch.manual_seed(0)
    return _perturb(getattr(transformers, model_cls)(getattr(transformers, config_cls)(**kw)))


def llama(**kw):
    return _build("LlamaForCausalLM", "LlamaConfig", **{**BASE, **kw})


def qwen2(**kw):
    return _build("Qwen2ForCausalLM", "Qwen2Config", **{**BASE, **kw})


def gemma(**kw):
    return _build("GemmaForCausalLM", "GemmaConfig", **{**BASE, "head_dim": 16, **kw})


def gemma2(**kw):
    # soft caps small enough to bite on these logits; query_pre_attn_scalar != head_dim; layers 0 local, 1 global;
    # an untied head (tied, this tiny random model's greedy continuation repeats one or two tokens; Gemma is tied)
    args = dict(
        head_dim=16,
        query_pre_attn_scalar=12,
        sliding_window=4,
        attn_logit_softcapping=5.0,
        final_logit_softcapping=3.0,
        tie_word_embeddings=False,
    )
    return _build("Gemma2ForCausalLM", "Gemma2Config", **{**BASE, **args, **kw})


def phi3(**kw):
    return _build("Phi3ForCausalLM", "Phi3Config", **{**BASE, "pad_token_id": 0, **kw})


def neox(**kw):
    args = {k: v for k, v in BASE.items() if k != "num_key_value_heads"}
    return _build("GPTNeoXForCausalLM", "GPTNeoXConfig", **{**args, "rotary_pct": 0.5, **kw})


FAMILIES = {
    "llama3-rope": lambda: llama(head_dim=16, rope_parameters=dict(LLAMA3)),
    "llama-linear-rope": lambda: llama(rope_parameters={"rope_type": "linear", "factor": 4.0}),
    # max_position_embeddings 16: generation (9 + 32 positions) runs past it, where the dynamic base grows
    "llama-dynamic-rope": lambda: llama(
        max_position_embeddings=16, rope_parameters={"rope_type": "dynamic", "factor": 4.0}
    ),
    "llama-yarn-rope": lambda: llama(
        rope_parameters={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16}
    ),
    "llama-yarn-mscale": lambda: llama(
        rope_parameters={
            "rope_type": "yarn",
            "factor": 4.0,
            "mscale": 1.0,
            "mscale_all_dim": 0.5,
            "beta_fast": 16.0,
            "truncate": False,
            "original_max_position_embeddings": 16,
        }
    ),
    "qwen2": qwen2,
    "qwen2-window-layers": lambda: qwen2(use_sliding_window=True, sliding_window=4, max_window_layers=1),
    "gemma": gemma,
    "gemma2": gemma2,
    "phi3": phi3,
    "phi3-partial-window": lambda: phi3(partial_rotary_factor=0.5, sliding_window=4),
    "gpt-neox": neox,
    "gpt-neox-sequential-tied": lambda: neox(use_parallel_residual=False, rotary_pct=0.25, tie_word_embeddings=True),
}

G = torch.Generator().manual_seed(1)
IDS = torch.randint(3, V, (3, 9), generator=G)
LONG = torch.randint(3, V, (2, 24), generator=G)  # past max_position_embeddings=16 of the dynamic family
LEFT = torch.ones(3, 9, dtype=torch.long)
LEFT[1, :4] = 0
LEFT[2, :1] = 0


def _diff(a, b) -> float:
    return (a - b).abs().max().item()


def _logits(hf, ours, ids=IDS, mask=None):
    """(HF logits, ours, where to compare): left padding, HF given position ids counted from the mask."""
    with torch.no_grad():
        if mask is not None:
            ids = ids.masked_fill(mask == 0, 0)
        pos = None if mask is None else (mask.cumsum(-1) - 1).clamp_min(0)
        return (
            hf(ids, attention_mask=mask, position_ids=pos).logits,
            ours(ids, mask).logits,
            slice(None) if mask is None else mask.bool(),
        )


# ------------------------------------------------------------------------------------------ (1) logits


@pytest.mark.parametrize("name", FAMILIES)
def test_logits_match_hf_with_and_without_padding(name):
    hf = FAMILIES[name]()
    ours = from_hf(hf)
    for mask in (None, LEFT):
        a, b, where = _logits(hf, ours, mask=mask)
        assert a.shape == b.shape and a.abs().max() > 0.1
        assert _diff(a[where], b[where]) <= TOL, f"{name}, padding={mask is not None}"


def test_dynamic_ntk_past_max_position_embeddings_matches_hf():
    """24 positions on a model trained for 16: the base grows with the length (a fresh HF model: its module
    remembers the longest length it has seen)."""
    hf = FAMILIES["llama-dynamic-rope"]()
    ours = from_hf(hf)
    a, b, _ = _logits(hf, ours, LONG)
    assert _diff(a, b) <= TOL
    plain = from_hf(llama(max_position_embeddings=16))  # same weights, no scaling
    _, c, _ = _logits(hf, plain, LONG)
    assert _diff(c, b) > 1e-2  # past 16 positions the whole call's table changes, the early positions' too
    _, short, _ = _logits(hf, ours, IDS)
    _, short_plain, _ = _logits(hf, plain, IDS)
    assert torch.equal(short, short_plain)  # within 16 positions: exactly the plain table


# ------------------------------------------------------------------------------------------ (2) greedy generation


@pytest.mark.parametrize("name", FAMILIES)
def test_greedy_32_tokens_match_hf_generate_left_padded(name):
    hf = FAMILIES[name]()
    ours = from_hf(hf)
    ids = IDS.masked_fill(LEFT == 0, 0)
    expected = hf.generate(
        ids, attention_mask=LEFT, max_new_tokens=32, do_sample=False, pad_token_id=0, eos_token_id=None
    )
    got = generate(ours, ids, LEFT, max_new_tokens=32, pad_token_id=0, eos_token_id=None)
    assert got.shape == expected.shape == (3, 9 + 32)
    assert torch.equal(got, expected)
    # the model's own eos (from its config), as HF's generate stops there by default
    expected = hf.generate(ids, attention_mask=LEFT, max_new_tokens=32, do_sample=False, pad_token_id=0)
    assert torch.equal(generate(ours, ids, LEFT, max_new_tokens=32, pad_token_id=0), expected)
    assert len(set(got[:, 9:].flatten().tolist())) > 3  # the continuation is not one repeated token


# ------------------------------------------------------------------------------------------ (3) round trips


@pytest.mark.parametrize("name", FAMILIES)
def test_hf_to_ours_to_hf_is_exact(name):
    hf = FAMILIES[name]()
    back = to_hf(from_hf(hf))
    assert type(back) is type(hf) and not back.training
    state = back.state_dict()
    assert set(state) == set(hf.state_dict())
    for key, value in hf.state_dict().items():
        assert torch.equal(state[key], value), key
    with torch.no_grad():  # the config written back computes the same thing: HF's logits bit for bit
        assert torch.equal(back(IDS, attention_mask=LEFT).logits, hf(IDS, attention_mask=LEFT).logits)


@pytest.mark.parametrize("name", ["llama3-rope", "qwen2", "gemma2", "phi3", "gpt-neox"])
def test_hf_directory_loads_and_saves_bit_exact(tmp_path, name):
    hf = FAMILIES[name]()
    hf.save_pretrained(tmp_path)
    ours = load_pretrained(tmp_path)
    a, b, where = _logits(hf, ours, mask=LEFT)
    assert _diff(a[where], b[where]) <= TOL
    save_pretrained(ours, tmp_path / "ours")
    again = load_pretrained(tmp_path / "ours")
    assert again.config == ours.config
    for key, value in ours.state_dict().items():
        assert torch.equal(again.state_dict()[key], value), key


def test_neox_checkpoints_with_the_older_embed_out_key_load(tmp_path):
    hf = neox()
    state = {("embed_out.weight" if k == "lm_head.weight" else k): v for k, v in hf.state_dict().items()}
    from anatomy.interop.hf import model_from_checkpoint

    config = hf.config.to_dict() | {"architectures": ["GPTNeoXForCausalLM"]}
    ours = model_from_checkpoint(config, state).eval()
    a, b, _ = _logits(hf, ours)
    assert _diff(a, b) <= TOL


@pytest.mark.parametrize(
    "name, rows",
    [
        ("gemma2", ("block 1 attention", "block 1 ffn", "final norm")),
        ("gpt-neox", ("block 0 attention", "block 1 ffn", "logits")),
        ("phi3-partial-window", ("block 1 ffn", "logits")),
    ],
)
def test_convert_cli_verifies_the_new_families_layer_by_layer(tmp_path, capsys, name, rows):
    from anatomy.cli.main import main

    FAMILIES[name]().save_pretrained(tmp_path / "hf")
    assert main(["convert", "--from-hf", str(tmp_path / "hf"), "--out", str(tmp_path / "ours"), "--verify"]) == 0
    out = capsys.readouterr().out
    lines = {line.split("  ")[0].strip(): line for line in out.splitlines()}
    for row in rows:
        assert row in lines, out
        assert float(lines[row].split()[-4]) <= TOL, lines[row]  # float32 max |ours - HF|
    assert "OK:" in out
    assert main(["convert", "--to-hf", str(tmp_path / "ours"), "--out", str(tmp_path / "hf2"), "--verify"]) == 0
    assert "OK:" in capsys.readouterr().out


if __name__ == "__main__":  # the table in docs/interop.md: python tests/interop/test_hf_families.py
    print(f"{'family':28s} {'max |ours - HF| logits':>24s} {'(left-padded)':>14s} {'max |logit|':>12s}")
    for family, make in FAMILIES.items():
        hf_model = make()
        model = from_hf(hf_model)
        a, b, _ = _logits(hf_model, model)
        ap, bp, where = _logits(hf_model, model, mask=LEFT)
        print(f"{family:28s} {_diff(a, b):24.2e} {_diff(ap[where], bp[where]):14.2e} {a.abs().max().item():12.2f}")
    a, b, _ = _logits(FAMILIES["llama-dynamic-rope"](), from_hf(FAMILIES["llama-dynamic-rope"]()), LONG)
    print(f"{'llama-dynamic-rope, 24 > 16':28s} {_diff(a, b):24.2e} {'':14s} {a.abs().max().item():12.2f}")
