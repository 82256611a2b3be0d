"""Beam search gives Hugging Face ``generate``'s tokens (num_beams=4) on tiny GPT-2, Llama and T5 models built from
local configs, with eos tokens that do end beams, left padding, length penalties, every early_stopping mode,
num_return_sequences and the repetition penalty; and it is a real search (it can beat greedy's log-probability).

HF fills finished rows with eos instead of a ``pad_token_id`` of 0 (its ``pad or eos`` test reads 0 as missing);
we fill with the pad id given, so these tests use a pad id other than 0.
"""

from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()

from transformers import (  # noqa: E402
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    T5Config,
    T5ForConditionalGeneration,
)

from anatomy.generation import generate  # noqa: E402
from anatomy.interop.hf import from_hf  # noqa: E402

V, PAD = 100, 7
IDS = torch.randint(3, V, (3, 9), generator=torch.Generator().manual_seed(1))
LEFT = torch.ones(3, 9, dtype=torch.long)
LEFT[1, :4] = 0
LEFT[2, :1] = 0
PADDED = IDS.masked_fill(LEFT == 0, PAD)


def _perturb(model, scale: float = 0.2):
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(scale * torch.randn(p.shape, generator=g))
    return model.eval()


@pytest.fixture(scope="module")
def gpt2():
    torch.manual_seed(0)
    hf = _perturb(GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=32, n_head=4, vocab_size=V, n_positions=64)))
    return hf, from_hf(hf)


@pytest.fixture(scope="module")
def eos(gpt2):
    """A token the beams do produce, so that hypotheses finish early and the finishing rules are exercised."""
    hf, _ = gpt2
    free = hf.generate(PADDED, attention_mask=LEFT, max_new_tokens=20, num_beams=4, do_sample=False, pad_token_id=PAD)
    return int(free[0, 9 + 3])


def _both(pair, **kw):
    hf, ours = pair
    kw = dict(max_new_tokens=20, num_beams=4, pad_token_id=PAD, **kw)
    want = hf.generate(PADDED, attention_mask=LEFT, do_sample=False, **kw)
    got = generate(ours, PADDED, LEFT, **kw)
    return want, got


def test_num_beams_4_gives_hf_generate_tokens(gpt2):
    want, got = _both(gpt2, eos_token_id=gpt2[0].generation_config.eos_token_id)
    assert got.shape == want.shape == (3, 29)
    assert torch.equal(got, want)


@pytest.mark.parametrize(
    "kw",
    [
        {},
        {"early_stopping": True},
        {"early_stopping": "never", "length_penalty": 0.0},
        {"early_stopping": "never", "length_penalty": 2.0},
        {"length_penalty": -1.0},
        {"repetition_penalty": 1.3},
        {"num_return_sequences": 3},
    ],
)
def test_finishing_rules_match_hf(gpt2, eos, kw):
    want, got = _both(gpt2, eos_token_id=eos, **kw)
    assert got.shape == want.shape
    assert torch.equal(got, want)
    if kw.get("length_penalty", 1.0) <= 1.0:  # (a length penalty of 2 prefers the hypotheses that went on)
        assert (got[:, 9:] == eos).any()  # some returned hypothesis did end on eos


def test_num_return_sequences_are_each_prompts_best_beams(gpt2, eos):
    hf, ours = gpt2
    four = generate(
        ours, PADDED, LEFT, max_new_tokens=12, num_beams=4, num_return_sequences=4, eos_token_id=eos, pad_token_id=PAD
    )
    two = generate(
        ours, PADDED, LEFT, max_new_tokens=12, num_beams=4, num_return_sequences=2, eos_token_id=eos, pad_token_id=PAD
    )
    one = generate(ours, PADDED, LEFT, max_new_tokens=12, num_beams=4, eos_token_id=eos, pad_token_id=PAD)
    assert four.shape[0] == 12 and two.shape[0] == 6 and one.shape[0] == 3
    for row in range(3):  # the sequences of a prompt are adjacent, best first
        assert torch.equal(four[4 * row, :9], PADDED[row]) and torch.equal(two[2 * row, :9], PADDED[row])
        n = one.shape[1]
        assert torch.equal(one[row], two[2 * row, :n]) and (two[2 * row, n:] == PAD).all()
        assert len({tuple(r.tolist()) for r in four[4 * row : 4 * row + 4]}) == 4  # distinct hypotheses


def test_beam_search_finds_a_likelier_sequence_than_greedy(gpt2):
    _, ours = gpt2

    def log_prob(seq):
        with torch.no_grad():
            logp = ours(seq).logits[:, :-1].log_softmax(-1)
        return logp.gather(-1, seq[:, 1:, None])[:, 8:].sum().item()  # the new tokens only

    prompt = IDS[:1]
    greedy = generate(ours, prompt, max_new_tokens=10)
    beams = generate(ours, prompt, max_new_tokens=10, num_beams=4, length_penalty=0.0)
    assert log_prob(beams) >= log_prob(greedy) - 1e-5
    wide = [log_prob(generate(ours, prompt, max_new_tokens=10, num_beams=k, length_penalty=0.0)) for k in (2, 8)]
    assert max(wide + [log_prob(beams)]) > log_prob(greedy)  # some width beats greedy on this model


def test_llama_and_t5_beams_match_hf():
    torch.manual_seed(0)
    hf = _perturb(
        LlamaForCausalLM(
            LlamaConfig(
                num_hidden_layers=2,
                hidden_size=32,
                num_attention_heads=4,
                num_key_value_heads=2,
                intermediate_size=64,
                vocab_size=V,
                max_position_embeddings=64,
            )
        )
    )
    kw = dict(max_new_tokens=15, num_beams=3, pad_token_id=PAD, eos_token_id=2, repetition_penalty=1.2)
    assert torch.equal(generate(from_hf(hf), IDS, **kw), hf.generate(IDS, do_sample=False, **kw))
    torch.manual_seed(0)
    t5 = _perturb(
        T5ForConditionalGeneration(
            T5Config(num_layers=2, num_decoder_layers=2, d_model=32, d_kv=8, num_heads=4, d_ff=64, vocab_size=V)
        )
    )
    right = LEFT.flip(-1)
    kw = dict(max_new_tokens=12, num_beams=4, pad_token_id=5, eos_token_id=1, num_return_sequences=2)
    want = t5.generate(input_ids=IDS, attention_mask=right, do_sample=False, decoder_start_token_id=0, **kw)
    got = generate(from_hf(t5), IDS, right, **kw)
    assert got.shape == want.shape == (6, 13) and torch.equal(got, want)


def test_several_eos_ids_keep_more_candidates_like_hf(gpt2, eos):
    hf, _ = gpt2
    free = hf.generate(PADDED, attention_mask=LEFT, max_new_tokens=20, num_beams=4, do_sample=False, pad_token_id=PAD)
    other = next(int(t) for t in free[1, 9:] if int(t) != eos)  # a second token the beams produce
    want, got = _both(gpt2, eos_token_id=[eos, other])  # (HF keeps 3 * num_beams candidates per step then)
    assert torch.equal(got, want)
