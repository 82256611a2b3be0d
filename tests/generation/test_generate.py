"""Generation: the next-token rules, and the KV-cached loop against recomputing the whole prefix every step.

(Token-identity with Hugging Face's ``generate`` is in tests/interop/test_hf.py.)
"""

from __future__ import annotations

import pytest
import torch

from anatomy import ModelConfig, build_model
from anatomy.generation import apply_temperature, generate, greedy, next_token, sample, top_k_filter, top_p_filter

SMALL = dict(vocab_size=50, d_model=32, n_heads=4, n_layers=2, d_ff=64, max_seq_len=64)
LLAMA = dict(n_kv_heads=2)


def _model(preset: str, **overrides):
    torch.manual_seed(0)
    model = build_model(ModelConfig.from_preset(preset, **{**SMALL, **overrides}))
    with torch.no_grad():
        for p in model.parameters():  # peaked, varied logits instead of a near-uniform random start
            p.add_(0.3 * torch.randn_like(p))
    return model.eval()


def _no_cache_greedy(model, ids, mask, n):
    """The reference: re-run the whole (left-padded) sequence every step, no cache."""
    for _ in range(n):
        with torch.no_grad():
            logits = model(ids, mask).logits[:, -1]
        ids = torch.cat([ids, logits.argmax(-1, keepdim=True)], dim=1)
        mask = None if mask is None else torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
    return ids


# ------------------------------------------------------------------------------------------ sampling rules


LOGITS = torch.tensor([[1.0, 3.0, 2.0, 0.0, -1.0], [0.0, 0.0, 5.0, 4.9, -2.0]])


def test_greedy_is_the_argmax():
    assert greedy(LOGITS).tolist() == [1, 2]
    assert next_token(LOGITS, temperature=0.1, top_k=1).tolist() == [1, 2]  # greedy ignores sampling settings


def test_top_k_keeps_exactly_the_k_largest():
    out = top_k_filter(LOGITS, 2)
    assert torch.isfinite(out).sum(-1).tolist() == [2, 2]
    assert torch.isfinite(out[0]).nonzero().flatten().tolist() == [1, 2]
    assert torch.equal(top_k_filter(LOGITS, 10), LOGITS)
    with pytest.raises(ValueError, match="top_k must be a positive integer"):
        top_k_filter(LOGITS, 0)


def test_top_p_keeps_the_smallest_set_reaching_p():
    probs = LOGITS.softmax(-1)
    for p in (0.05, 0.5, 0.8, 0.95, 0.999):
        kept = torch.isfinite(top_p_filter(LOGITS, p))
        for row in range(2):
            order = probs[row].argsort(descending=True)
            mass = probs[row][order].cumsum(0)
            need = int((mass < p).sum()) + 1  # tokens needed to reach p
            assert kept[row].sum() == need
            assert kept[row][order[:need]].all()  # and they are the most likely ones
    assert torch.equal(top_p_filter(LOGITS, 1.0), LOGITS)
    with pytest.raises(ValueError, match=r"top_p must be in \(0, 1\]"):
        top_p_filter(LOGITS, 0.0)


def test_temperature_and_sampling():
    assert torch.equal(apply_temperature(LOGITS, 2.0), LOGITS / 2)
    with pytest.raises(ValueError, match="temperature must be > 0"):
        apply_temperature(LOGITS, 0.0)
    a = sample(LOGITS, torch.Generator().manual_seed(3))
    b = sample(LOGITS, torch.Generator().manual_seed(3))
    assert torch.equal(a, b)
    draws = torch.stack([next_token(LOGITS, do_sample=True, top_k=1) for _ in range(20)])
    assert (draws == greedy(LOGITS)).all()  # top-k 1 leaves only the argmax
    low = torch.stack(
        [next_token(LOGITS, do_sample=True, top_p=0.9, generator=torch.Generator().manual_seed(i)) for i in range(200)]
    )
    assert set(low[:, 0].tolist()) <= {1, 2, 0}  # outside the nucleus never drawn


# ------------------------------------------------------------------------------------------ the cached loop


@pytest.mark.parametrize(
    "preset,overrides",
    [
        ("gpt2", {}),
        ("llama", {"n_kv_heads": 2}),
        ("seed-block", {"architecture": "decoder_lm"}),
        ("llama", {"n_kv_heads": 2, "sliding_window": 3}),
    ],
)  # rolling cache
def test_cached_greedy_equals_recomputing_the_prefix(preset, overrides):
    model = _model(preset, **overrides)
    if overrides.get("sliding_window"):  # the cache rolls: it is sized by the window, not the sequence
        assert all(c.window == 3 and c.capacity == 6 for c in model.new_caches(capacity=18))
    ids = torch.randint(1, 50, (3, 6), generator=torch.Generator().manual_seed(1))
    mask = torch.ones(3, 6, dtype=torch.long)
    mask[1, :2] = 0
    mask[2, :5] = 0
    ids = ids.masked_fill(mask == 0, 0)
    for m in (None, mask):  # pad_token_id=None: no mask is inferred, every token is attended to
        got = generate(model, ids, m, max_new_tokens=12, pad_token_id=None)
        assert torch.equal(got, _no_cache_greedy(model, ids, m, 12))
    # no mask, the model's pad_token_id (0) in the ids: the mask is inferred from it, as HF infers it
    assert torch.equal(generate(model, ids, max_new_tokens=12), generate(model, ids, mask, max_new_tokens=12))


def test_left_padding_gives_each_row_what_it_gets_alone():
    model = _model("llama", **LLAMA)
    prompts = [[5, 6, 7, 8, 9], [11, 12], [3]]
    width = max(map(len, prompts))
    ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    batch = generate(model, ids, mask, max_new_tokens=10)
    for row, p in enumerate(prompts):
        alone = generate(model, torch.tensor([p]), max_new_tokens=10)
        assert batch[row, width:].tolist() == alone[0, len(p) :].tolist()


def test_eos_pads_finished_rows_and_stops_when_all_are_done():
    model = _model("gpt2")
    ids = torch.randint(1, 50, (2, 4), generator=torch.Generator().manual_seed(2))
    free = generate(model, ids, max_new_tokens=12)[:, 4:]
    eos = int(free[0, 2])  # row 0 emits this token at step 2
    out = generate(model, ids, max_new_tokens=12, eos_token_id=eos, pad_token_id=49)[:, 4:]
    first = [int((row == eos).nonzero()[0]) if (row == eos).any() else None for row in free]
    assert out.shape[1] == (12 if None in first else max(first) + 1)
    for row, stop in enumerate(first):
        if stop is not None:
            assert out[row, : stop + 1].tolist() == free[row, : stop + 1].tolist()
            assert (out[row, stop + 1 :] == 49).all()


@pytest.mark.parametrize("preset", ["t5", "vaswani-2017"])
def test_seq2seq_encodes_once_and_matches_recomputation(preset):
    model = _model(preset)
    src = torch.randint(1, 50, (2, 7), generator=torch.Generator().manual_seed(4))
    mask = torch.ones(2, 7, dtype=torch.long)
    mask[1, 5:] = 0
    calls = []
    handle = model.encoder.register_forward_hook(lambda *_: calls.append(1))
    got = generate(model, src, mask, max_new_tokens=10)
    handle.remove()
    assert len(calls) == 1 and got.shape == (2, 11) and (got[:, 0] == model.decoder_start_token_id).all()
    dec = got[:, :1]
    for _ in range(10):
        with torch.no_grad():
            logits = model(src, mask, decoder_input_ids=dec).logits[:, -1]
        dec = torch.cat([dec, logits.argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(got, dec)


def test_sampled_generation_is_reproducible_and_restores_training_mode():
    model = _model("llama", **LLAMA).train()
    ids = torch.tensor([[4, 5, 6]])
    a = generate(
        model,
        ids,
        max_new_tokens=8,
        do_sample=True,
        top_k=10,
        top_p=0.9,
        temperature=0.7,
        generator=torch.Generator().manual_seed(0),
    )
    b = generate(
        model,
        ids,
        max_new_tokens=8,
        do_sample=True,
        top_k=10,
        top_p=0.9,
        temperature=0.7,
        generator=torch.Generator().manual_seed(0),
    )
    assert torch.equal(a, b) and a.shape == (1, 11) and model.training


def test_a_submodule_left_in_training_mode_decodes_in_eval_mode_and_an_eval_model_is_not_switched():
    model = _model("gpt2").eval()
    ids = torch.tensor([[4, 5, 6]])
    want = generate(model, ids, max_new_tokens=6)
    block = model.stack.blocks[0]
    block.train()  # one submodule in training mode: generate switches the whole model to eval, then back
    seen: list[bool] = []
    handle = block.register_forward_pre_hook(lambda m, args: seen.append(m.training))
    try:
        got = generate(model, ids, max_new_tokens=6)
    finally:
        handle.remove()
    assert torch.equal(got, want) and seen and not any(seen)
    assert not model.training and not block.training  # the root's mode, as before
    switched: list[bool] = []
    model.train = lambda mode=True: switched.append(mode)  # an eval model throughout: its modes are left alone
    assert torch.equal(generate(model, ids, max_new_tokens=6), want) and switched == []


def test_bad_input():
    model = _model("gpt2")
    ids = torch.tensor([[1, 2, 3]])
    with pytest.raises(ValueError, match="max_new_tokens must be a non-negative integer"):
        generate(model, ids, max_new_tokens=-1)
    with pytest.raises(ValueError, match="eos_token_id"):
        generate(model, ids, max_new_tokens=2, eos_token_id=-3)
    with pytest.raises(ValueError, match="input_ids must have 2 dimensions"):
        generate(model, ids[0], max_new_tokens=2)
    with pytest.raises(ValueError, match=r"attention_mask must have shape \(B=1, S=3\)"):
        generate(model, ids, torch.ones(1, 4, dtype=torch.long), max_new_tokens=2)
    with pytest.raises(TypeError, match="DecoderLM or Seq2Seq"):
        generate(_model("bert"), ids, max_new_tokens=2)
    assert torch.equal(generate(model, ids, max_new_tokens=0), ids)
