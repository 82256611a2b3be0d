"""Repetition penalty and min-p against Hugging Face's logits processors (same kept token sets, same values), and
their place in ``generate``: greedy with a penalty equals HF's greedy with one; sampled min-p draws only kept tokens.
"""

from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()

from transformers import GPT2Config, GPT2LMHeadModel, MinPLogitsWarper, RepetitionPenaltyLogitsProcessor  # noqa: E402

from anatomy.generation import apply_repetition_penalty, generate, min_p_filter, seen_tokens  # noqa: E402
from anatomy.interop.hf import from_hf  # noqa: E402

G = torch.Generator().manual_seed(0)
LOGITS = torch.randn(4, 50, generator=G) * 3  # (B, V), positive and negative logits
IDS = torch.randint(0, 50, (4, 12), generator=G)


@pytest.mark.parametrize("penalty", [1.0, 1.3, 2.0, 0.7])
def test_repetition_penalty_equals_hfs_processor(penalty):
    want = RepetitionPenaltyLogitsProcessor(penalty)(IDS, LOGITS.clone())
    got = apply_repetition_penalty(LOGITS, seen_tokens(IDS, 50), penalty)
    assert torch.equal(got, want)
    changed = got != LOGITS
    if penalty != 1.0:
        assert torch.equal(changed, seen_tokens(IDS, 50) & (LOGITS != 0))  # exactly the tokens already seen
        lower = got < LOGITS  # > 1: a seen token's logit goes down whatever its sign (< 1: up)
        assert torch.equal(lower if penalty > 1 else got > LOGITS, changed)


def test_left_padding_is_not_penalised_like_hfs_prompt_ignore_length():
    mask = torch.ones(4, 12, dtype=torch.bool)
    mask[1, :5] = False
    mask[3, :2] = False
    lengths = (~mask).sum(-1)  # leading pads per row
    want = RepetitionPenaltyLogitsProcessor(1.5, prompt_ignore_length=lengths)(IDS, LOGITS.clone())
    assert torch.equal(apply_repetition_penalty(LOGITS, seen_tokens(IDS, 50, mask), 1.5), want)


@pytest.mark.parametrize("p", [0.0, 0.01, 0.05, 0.2, 0.5, 1.0])
def test_min_p_keeps_hfs_token_set(p):
    want = MinPLogitsWarper(min_p=p)(IDS, LOGITS.clone())
    got = min_p_filter(LOGITS, p)
    assert torch.equal(torch.isfinite(got), torch.isfinite(want))
    assert torch.equal(got[torch.isfinite(got)], LOGITS[torch.isfinite(got)])  # kept logits unchanged
    probs = LOGITS.softmax(-1)
    assert torch.equal(torch.isfinite(got), probs >= p * probs.amax(-1, keepdim=True))
    assert torch.isfinite(got).sum(-1).min() >= 1


def test_bad_values_are_named():
    with pytest.raises(ValueError, match=r"min_p must be in \[0, 1\]"):
        min_p_filter(LOGITS, 1.5)
    with pytest.raises(ValueError, match="repetition_penalty must be > 0"):
        apply_repetition_penalty(LOGITS, seen_tokens(IDS, 50), 0.0)


@pytest.fixture(scope="module")
def gpt2():
    torch.manual_seed(0)
    hf = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=32, n_head=4, vocab_size=100, n_positions=64))
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in hf.parameters():
            p.add_(0.2 * torch.randn(p.shape, generator=g))
    return hf.eval(), from_hf(hf.eval())


def test_greedy_with_repetition_penalty_equals_hf_generate(gpt2):
    hf, ours = gpt2
    ids = torch.randint(3, 100, (3, 9), generator=torch.Generator().manual_seed(1))
    mask = torch.ones(3, 9, dtype=torch.long)
    mask[1, :4] = 0
    ids = ids.masked_fill(mask == 0, 0)
    kw = dict(max_new_tokens=24, repetition_penalty=1.5, pad_token_id=0)
    want = hf.generate(ids, attention_mask=mask, do_sample=False, **kw)
    got = generate(ours, ids, mask, **kw)
    assert torch.equal(got, want)
    plain = generate(ours, ids, mask, max_new_tokens=24)
    assert not torch.equal(got, plain)  # the penalty changed the text
    distinct = lambda out: sum(len(set(row[9:].tolist())) for row in out)  # noqa: E731
    assert distinct(got) > distinct(plain)  # fewer repeats


def test_sampled_min_p_draws_only_kept_tokens(gpt2):
    _, ours = gpt2
    ids = torch.randint(3, 100, (1, 6), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        probs = ours(ids).logits[0, -1].softmax(-1)
    allowed = set((probs >= 0.3 * probs.max()).nonzero().flatten().tolist())
    draws = {
        int(
            generate(
                ours, ids, max_new_tokens=1, do_sample=True, min_p=0.3, generator=torch.Generator().manual_seed(s)
            )[0, -1]
        )
        for s in range(60)
    }
    assert draws <= allowed
    free = {
        int(generate(ours, ids, max_new_tokens=1, do_sample=True, generator=torch.Generator().manual_seed(s))[0, -1])
        for s in range(60)
    }
    assert not free <= allowed  # without min-p the same seeds reach beyond the kept set
