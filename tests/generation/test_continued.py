"""anatomy.generation.continued: ``generate(..., past_key_values=cache)`` goes on from a cache as Hugging Face's
``generate`` does in a chat loop, on the same weights (tiny random GPT-2 and Llama, a left-padded batch), with our
``ModelCache`` and with a transformers ``DynamicCache``."""

from __future__ import annotations

import pytest
import torch

import anatomy

transformers = pytest.importorskip("transformers", reason="waits for transformers (pip install transformers)")

from anatomy.interop.hf import from_hf  # noqa: E402


@pytest.fixture(scope="module", params=["gpt2", "llama"])
def pair(request):
    torch.manual_seed(0)
    tokens = dict(bos_token_id=None, eos_token_id=None, pad_token_id=0)
    if request.param == "gpt2":
        cfg = transformers.GPT2Config(vocab_size=64, n_positions=64, n_embd=16, n_layer=2, n_head=4, **tokens)
        hf = transformers.GPT2LMHeadModel(cfg)
    else:
        cfg = transformers.LlamaConfig(
            vocab_size=64,
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=64,
            **tokens,
        )
        hf = transformers.LlamaForCausalLM(cfg)
    hf.eval()
    return hf, from_hf(hf).eval()


def _turns():
    gen = torch.Generator().manual_seed(3)
    first = torch.randint(1, 64, (2, 5), generator=gen)
    first[0, :2] = 0  # left padding
    return first, (first != 0).long(), torch.randint(1, 64, (2, 3), generator=gen)


@pytest.mark.parametrize("cache_kind", ["ours", "transformers"])
def test_a_chat_loop_goes_on_from_the_cache_as_transformers_does(pair, cache_kind):
    hf, ours = pair
    ids, mask, turn = _turns()
    options = dict(max_new_tokens=4, do_sample=False, return_dict_in_generate=True, output_logits=True)
    hf_cache = transformers.DynamicCache()
    want1 = hf.generate(ids, attention_mask=mask, cache=hf_cache, **options)  # transformers 5's name
    ids2 = torch.cat([want1.sequences, turn], 1)  # every token so far, then the next turn
    mask2 = torch.cat([mask, torch.ones(2, ids2.shape[1] - ids.shape[1], dtype=torch.long)], 1)
    want2 = hf.generate(ids2, attention_mask=mask2, cache=hf_cache, **options)

    given = transformers.DynamicCache() if cache_kind == "transformers" else None
    got1 = ours.generate(ids, attention_mask=mask, past_key_values=given, **options)
    cache = got1.past_key_values
    assert torch.equal(got1.sequences, want1.sequences)
    assert cache.get_seq_length() == ids.shape[1] + 3  # the last new token is never fed, as in HF
    if cache_kind == "transformers":
        assert cache is given
    got2 = ours.generate(ids2, attention_mask=mask2, past_key_values=cache, **options)
    assert torch.equal(got2.sequences, want2.sequences)
    assert got2.cache is cache and cache.get_seq_length() == hf_cache.get_seq_length()
    for mine, theirs in zip(got2.logits, want2.logits):
        torch.testing.assert_close(mine, theirs, atol=1e-5, rtol=1e-5)
    k, v = cache.layers[0].keys, cache.layers[0].values  # (B, Hkv, S, Dh), equal where real
    keep = torch.cat([mask2, torch.ones(2, k.shape[2] - mask2.shape[1], dtype=torch.long)], 1).bool()[:, None, :, None]
    torch.testing.assert_close(
        (k * keep), (hf_cache.layers[0].keys * keep), atol=1e-5, rtol=1e-5, msg=lambda m: f"keys: {m}"
    )
    torch.testing.assert_close((v * keep), (hf_cache.layers[0].values * keep), atol=1e-5, rtol=1e-5)
    fresh = ours.generate(ids2, attention_mask=mask2, max_new_tokens=4)  # the same as starting over
    assert torch.equal(fresh, want2.sequences)


def test_transformers_5_name_cache_works_too_and_a_sampled_turn_draws_as_transformers(pair):
    hf, ours = pair
    ids, mask, turn = _turns()
    torch.manual_seed(7)
    hf_cache = transformers.DynamicCache()
    first = hf.generate(ids, attention_mask=mask, cache=hf_cache, max_new_tokens=3, do_sample=True)
    ids2 = torch.cat([first, turn], 1)
    mask2 = torch.cat([mask, torch.ones(2, ids2.shape[1] - ids.shape[1], dtype=torch.long)], 1)
    want = hf.generate(ids2, attention_mask=mask2, cache=hf_cache, max_new_tokens=5, do_sample=True)
    torch.manual_seed(7)
    out = ours.generate(ids, attention_mask=mask, max_new_tokens=3, do_sample=True, return_dict_in_generate=True)
    assert torch.equal(out.sequences, first)
    got = ours.generate(ids2, attention_mask=mask2, cache=out.cache, max_new_tokens=5, do_sample=True)
    assert torch.equal(got, want)


def test_what_cannot_go_on_from_a_cache_is_refused_by_name(pair):
    _, ours = pair
    ids, mask, _ = _turns()
    out = ours.generate(ids, attention_mask=mask, max_new_tokens=2, return_dict_in_generate=True)
    with pytest.raises(ValueError, match="already holds 6 tokens and input_ids has 5"):
        ours.generate(ids, attention_mask=mask, past_key_values=out.cache, max_new_tokens=2)
    with pytest.raises(ValueError, match="one output per prompt"):
        ours.generate(out.sequences, past_key_values=out.cache, num_beams=2, max_new_tokens=2)
    with pytest.raises(TypeError, match="legacy"):
        ours.generate(out.sequences, past_key_values=out.cache.to_legacy_cache(), max_new_tokens=2)
    with pytest.raises(ValueError, match="past_key_values or cache, not both"):
        ours.generate(out.sequences, past_key_values=out.cache, cache=out.cache, max_new_tokens=2)
    with pytest.raises(ValueError, match="holds a batch of 2 rows, input_ids has 1"):
        ours.generate(out.sequences[:1], past_key_values=out.cache, max_new_tokens=2)
    t5 = anatomy.build_model(anatomy.ModelConfig.from_preset("t5", n_layers=1, d_model=16, n_heads=2, vocab_size=32))
    with pytest.raises(ValueError, match="encoder-decoder"):
        t5.generate(torch.ones(1, 3, dtype=torch.long), past_key_values=out.cache, max_new_tokens=2)


@pytest.mark.parametrize("cache_kind", ["ours", "transformers"])
def test_a_shared_prompt_cache_copied_for_each_continuation_as_transformers_docs_do(pair, cache_kind):
    """A forward fills a cache with a common prefix; each prompt that starts with it generates from a deep copy."""
    import copy

    hf, ours = pair
    gen = torch.Generator().manual_seed(6)
    prefix = torch.randint(1, 64, (1, 6), generator=gen)
    with torch.no_grad():
        hf_cache = hf(prefix, past_key_values=transformers.DynamicCache()).past_key_values
        given = transformers.DynamicCache() if cache_kind == "transformers" else None
        cache = ours(prefix, past_key_values=given, use_cache=True).past_key_values
    for extra in (2, 4):
        ids = torch.cat([prefix, torch.randint(1, 64, (1, extra), generator=gen)], 1)
        want = hf.generate(
            ids, attention_mask=torch.ones_like(ids), cache=copy.deepcopy(hf_cache), max_new_tokens=6, do_sample=False
        )
        assert torch.equal(ours.generate(ids, past_key_values=copy.deepcopy(cache), max_new_tokens=6), want)
    assert cache.get_seq_length() == 6  # the shared prefix stays as it was
