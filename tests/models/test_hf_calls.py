"""Hugging Face calls on our models: output_hidden_states, output_attentions, past_key_values / use_cache (our
ModelCache, legacy tuples, a transformers DynamicCache), tuple indexing of outputs, return_dict=False,
num_parameters() and model.generate(), held against HF's own answers on tiny GPT-2 and Llama models (float32, built
from local configs, weights perturbed so nothing sits at its initial value; nothing is downloaded)."""

from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()

from transformers import (  # noqa: E402
    DynamicCache,
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    T5Config,
    T5ForConditionalGeneration,
)

from anatomy import ModelConfig, build_model  # noqa: E402
from anatomy.generation import generate  # noqa: E402
from anatomy.interop.hf import from_hf  # noqa: E402
from anatomy.models import ModelCache  # noqa: E402

V, TOL = 100, 1e-5


def _perturb(model, scale: float = 0.2):
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(scale * torch.randn(p.shape, generator=g))
    return model.eval()


def gpt2():
    torch.manual_seed(0)
    return _perturb(
        GPT2LMHeadModel(
            GPT2Config(n_layer=2, n_embd=32, n_head=4, vocab_size=V, n_positions=64, attn_implementation="eager")
        )
    )


def llama():
    torch.manual_seed(0)
    return _perturb(
        LlamaForCausalLM(
            LlamaConfig(
                num_hidden_layers=2,
                hidden_size=32,
                num_attention_heads=4,
                num_key_value_heads=2,
                intermediate_size=64,
                vocab_size=V,
                max_position_embeddings=64,
                attn_implementation="eager",
            )
        )
    )


FAMILIES = {"gpt2": gpt2, "llama": llama}
IDS = torch.randint(3, V, (2, 7), generator=torch.Generator().manual_seed(1))
NEXT = torch.randint(3, V, (2, 2), generator=torch.Generator().manual_seed(2))


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and float((a - b).abs().max()) <= TOL


@pytest.fixture(scope="module", params=list(FAMILIES))
def pair(request):
    hf = FAMILIES[request.param]()
    return hf, from_hf(hf)


def test_hidden_states_attentions_and_cache_equal_hfs(pair):
    hf, ours = pair
    with torch.no_grad():
        want = hf(IDS, output_hidden_states=True, output_attentions=True, use_cache=True)
        got = ours(IDS, output_hidden_states=True, output_attentions=True, use_cache=True)
    assert len(got.hidden_states) == len(want.hidden_states) == 3  # embeddings + 2 blocks (the last one normed)
    assert all(_close(a, b) for a, b in zip(got.hidden_states, want.hidden_states))
    assert _close(got.hidden_states[-1], got.last_hidden_state)
    assert len(got.attentions) == len(want.attentions) == 2
    assert all(_close(a, b) for a, b in zip(got.attentions, want.attentions))
    assert got.attentions[0].shape == (2, 4, 7, 7)
    cache, theirs = got.past_key_values, want.past_key_values
    assert isinstance(cache, ModelCache) and cache.get_seq_length() == theirs.get_seq_length() == 7
    assert len(cache) == len(theirs.layers) == 2
    for (k, v), layer in zip(cache, theirs.layers):  # keys after RoPE for Llama, (B, Hkv, S, Dh)
        assert _close(k, layer.keys) and _close(v, layer.values)
    assert all(_close(a, b.keys) for a, b in zip((lay.keys for lay in cache.layers), theirs.layers))


def test_decoding_from_each_kind_of_cache_equals_hf(pair):
    hf, ours = pair
    with torch.no_grad():
        want = hf(NEXT, cache=hf(IDS, use_cache=True).past_key_values, use_cache=True).logits
        first = ours(IDS, use_cache=True).past_key_values
        assert first.get_seq_length() == 7
        ours_cache = ours(NEXT, past_key_values=first, use_cache=True)
        assert ours_cache.past_key_values is first and first.get_seq_length() == 9  # filled in place, as HF
        legacy = ours(IDS, use_cache=True).past_key_values.to_legacy_cache()
        assert isinstance(legacy, tuple) and len(legacy[0]) == 2
        from_legacy = ours(NEXT, past_key_values=legacy, use_cache=True)
        hf_cache = hf(IDS, use_cache=True).past_key_values
        from_hf_cache = ours(NEXT, past_key_values=hf_cache, use_cache=True)
        new_name = ours(NEXT, cache=ours(IDS, use_cache=True).past_key_values)  # transformers 5's `cache=`
    for out in (ours_cache, from_legacy, from_hf_cache, new_name):
        assert _close(out.logits, want)
    assert from_hf_cache.past_key_values is hf_cache and hf_cache.get_seq_length() == 9  # HF's cache got the entries
    with torch.no_grad():  # and HF can go on from the cache our model filled
        after = hf(NEXT[:, :1], cache=hf_cache).logits
        ref = hf(torch.cat([IDS, NEXT, NEXT[:, :1]], 1)).logits[:, -1:]
    assert _close(after, ref)
    assert isinstance(first.to_hf(), DynamicCache) and first.to_hf().get_seq_length() == 9


def test_outputs_index_like_hf_model_output(pair):
    hf, ours = pair
    labels = IDS.clone()
    with torch.no_grad():
        want = hf(IDS, labels=labels, use_cache=False)
        got = ours(IDS, labels=labels)
        plain = ours(IDS)
        as_tuple = ours(IDS, labels=labels, return_dict=False)
    assert torch.equal(got[0], got.loss) and torch.equal(got[1], got.logits)  # loss first when given, as HF
    assert _close(got[0], want[0]) and _close(got[1], want[1])
    assert torch.equal(plain[0], plain.logits) and len(plain) == 1 and list(plain.keys()) == ["logits"]
    assert torch.equal(got["logits"], got.logits) and "loss" in got and "past_key_values" not in got
    assert isinstance(as_tuple, tuple) and len(as_tuple) == 2 and torch.equal(as_tuple[1], got.logits)
    loss, logits = got[:2]
    assert loss is got.loss and logits is got.logits
    with pytest.raises(KeyError, match="no field 'loss' set"):
        plain["loss"]
    assert plain.last_hidden_state is not None and "last_hidden_state" not in plain.keys()  # ours, not HF's


def test_num_parameters_counts_like_hf(pair):
    hf, ours = pair
    for kw in ({}, {"exclude_embeddings": True}, {"only_trainable": True}):
        assert ours.num_parameters(**kw) == hf.num_parameters(**kw), kw
    assert ours.num_parameters(exclude_embeddings=True) < ours.num_parameters()
    ours.lm_head.weight.requires_grad_(False)
    try:
        assert ours.num_parameters(only_trainable=True) < ours.num_parameters()
    finally:
        ours.lm_head.weight.requires_grad_(True)


def test_model_generate_takes_hf_argument_names(pair):
    hf, ours = pair
    eos = hf.generation_config.eos_token_id
    want = hf.generate(IDS, max_new_tokens=8, do_sample=False, pad_token_id=0, eos_token_id=eos)
    got = ours.generate(IDS, max_new_tokens=8, do_sample=False, pad_token_id=0, eos_token_id=eos)
    assert torch.equal(got, want)
    assert torch.equal(ours.generate(inputs=IDS, max_length=15, eos_token_id=eos), want)  # max_length counts the prompt
    sampled = ours.generate(
        IDS,
        attention_mask=torch.ones_like(IDS),
        max_new_tokens=5,
        do_sample=True,
        top_k=5,
        num_return_sequences=3,
        generator=torch.Generator().manual_seed(0),
    )
    assert sampled.shape == (6, 12) and torch.equal(sampled[:3, :7], IDS[:1].expand(3, -1))
    with pytest.raises(TypeError, match="unexpected keyword argument 'typical_p'"):
        ours.generate(IDS, typical_p=0.5)


def test_encoder_classifier_and_seq2seq_take_the_same_flags():
    torch.manual_seed(0)
    small = dict(vocab_size=50, d_model=32, n_heads=4, n_layers=2, d_ff=64, max_seq_len=32)
    ids = torch.randint(1, 50, (2, 6))
    enc = build_model(ModelConfig.from_preset("bert", **small)).eval()
    out = enc(ids, output_hidden_states=True, output_attentions=True)
    assert len(out.hidden_states) == 3 and torch.equal(out.hidden_states[-1], out.last_hidden_state)
    assert torch.equal(out[0], out.last_hidden_state) and len(out) == 3
    cls = build_model(ModelConfig.from_preset("bert", **small, architecture="classifier", num_labels=3)).eval()
    c = cls(ids, output_hidden_states=True, labels=torch.tensor([0, 2]))
    assert len(c.hidden_states) == 3 and torch.equal(c[1], c.logits) and c.pooled is not None
    assert cls.num_parameters() == sum(p.numel() for p in cls.parameters())
    s2s = build_model(ModelConfig.from_preset("t5", **small)).eval()
    with torch.no_grad():
        full = s2s(ids, decoder_input_ids=ids[:, :4], output_hidden_states=True)
        step = s2s(ids, decoder_input_ids=ids[:, :3], use_cache=True)
        assert step.past_key_values.get_seq_length() == 3 and len(step.past_key_values[0]) == 4  # self k, v; cross
        nxt = s2s(
            ids,
            decoder_input_ids=ids[:, 3:4],
            past_key_values=step.past_key_values,
            encoder_outputs=(step.encoder_last_hidden_state,),
        )
    assert len(full.decoder_hidden_states) == 3 and len(full.encoder_hidden_states) == 3
    assert step.past_key_values.get_seq_length() == 4  # the next call appended to it
    assert torch.allclose(nxt.logits[:, -1], full.logits[:, 3], atol=TOL)
    assert torch.equal(s2s.generate(ids, max_new_tokens=4), generate(s2s, ids, max_new_tokens=4))


def test_t5_decodes_from_an_hf_encoder_decoder_cache():
    torch.manual_seed(0)
    hf = _perturb(
        T5ForConditionalGeneration(
            T5Config(num_layers=2, num_decoder_layers=2, d_model=32, d_kv=8, num_heads=4, d_ff=64, vocab_size=V)
        )
    )
    ours = from_hf(hf)
    dec = torch.randint(3, V, (2, 4), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        theirs = hf(input_ids=IDS, decoder_input_ids=dec[:, :3], use_cache=True)
        want = hf(input_ids=IDS, decoder_input_ids=dec[:, 3:], cache=theirs.past_key_values).logits
        got = ours(
            IDS,
            decoder_input_ids=dec[:, 3:],
            past_key_values=hf(input_ids=IDS, decoder_input_ids=dec[:, :3], use_cache=True).past_key_values,
        ).logits
    assert _close(got, want)


def test_a_sliding_window_cache_from_hf_decodes_like_hf():
    torch.manual_seed(0)
    hf = _perturb(
        MistralForCausalLM(
            MistralConfig(
                num_hidden_layers=2,
                hidden_size=32,
                num_attention_heads=4,
                num_key_value_heads=2,
                intermediate_size=64,
                vocab_size=V,
                max_position_embeddings=64,
                sliding_window=4,
            )
        )
    )
    ours = from_hf(hf)
    with torch.no_grad():
        theirs = hf(IDS, use_cache=True).past_key_values
        assert theirs.layers[0].keys.shape[-2] == 3 < theirs.get_seq_length() == 7  # HF holds the last W - 1
        want = hf(NEXT, cache=theirs).logits
        got = ours(NEXT, past_key_values=hf(IDS, use_cache=True).past_key_values)
        mine = ours(NEXT, past_key_values=ours(IDS, use_cache=True).past_key_values).logits
    assert _close(got.logits, want) and _close(mine, want)
    assert got.past_key_values.get_seq_length() == 9


def test_bad_caches_are_named():
    ours = from_hf(gpt2())
    with pytest.raises(ValueError, match="past_key_values or kv_caches, not both"):
        ours(IDS, past_key_values=ours.new_caches(), kv_caches=ours.new_caches())
    with pytest.raises(ValueError, match=r"one entry per layer \(2\), got 1"):
        ours(NEXT, past_key_values=((IDS.float(), IDS.float()),))
    with pytest.raises(TypeError, match="past_key_values must be a ModelCache"):
        ours(NEXT, past_key_values="cache")


KEEPS = {
    "all": 0,
    "last": 1,
    "last 3": 3,
    "more than T": 10,
    "1-D positions": torch.tensor([0, 4, 6]),
    "1-D boolean": torch.tensor([True, False, True, False, False, True, True]),
    "2-D positions": torch.tensor([[1, 2], [6, 0]]),
    "2-D boolean": torch.tensor([[True] * 3 + [False] * 4, [False] * 5 + [True] * 2]),
}


@pytest.mark.parametrize("keep", list(KEEPS))
def test_logits_to_keep_equals_hfs(pair, keep):
    """HF's ``logits_to_keep`` (transformers 5: ``slice_logits_to_keep`` before the head) gives the same logits, in
    the same shape, on the same weights; with a cache too."""
    hf, ours = pair
    with torch.no_grad():
        a = hf(IDS, logits_to_keep=KEEPS[keep]).logits
        b = ours(IDS, logits_to_keep=KEEPS[keep]).logits
        assert _close(a, b), keep
        past = ours(IDS, use_cache=True).past_key_values
        hf_past = hf(IDS, use_cache=True).cache
        c = ours(NEXT, past_key_values=past, logits_to_keep=1).logits
        d = hf(NEXT, cache=hf_past, logits_to_keep=1).logits
    assert c.shape == (2, 1, V) and _close(c, d)


def test_logits_to_keep_refuses_what_hf_would_misread():
    hf, ours = gpt2(), None
    ours = from_hf(hf)
    for bad, match in [
        (-1, "logits_to_keep must be >= 0"),
        (1.5, "logits_to_keep must be an int or a tensor"),
        (True, "logits_to_keep must be an int or a tensor"),
        (torch.tensor([0.5]), "1-D or 2-D tensor of positions"),
        (torch.zeros(1, 2, 3, dtype=torch.long), "1-D or 2-D tensor of positions"),
    ]:
        with pytest.raises((ValueError, TypeError), match=match):
            ours(IDS, logits_to_keep=bad)
    with pytest.raises(ValueError, match="labels need the logits of every position: give logits_to_keep=0"):
        ours(IDS, labels=IDS, logits_to_keep=1)


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_left_padded_labels_give_hfs_loss_and_where_hfs_two_kernels_differ_the_one_term_is_said(kind):
    """Left padding with ``labels`` = ids and -100 on the pads: the last pad position "predicts" the first real
    token, a term both losses keep. That query sees no key: ours and HF's default SDPA kernel give it the same logits
    (attention output zero), so the losses are equal; HF's eager kernel fills hidden scores with finfo.min and
    spreads the row over the pads, so its loss differs by exactly that one term. With the first real token's
    label also -100 the three agree."""
    import torch.nn.functional as F

    from anatomy.interop.hf import from_hf

    def hf_model(impl: str):
        torch.manual_seed(0)
        if kind == "gpt2":
            cfg = GPT2Config(vocab_size=64, n_positions=64, n_embd=16, n_layer=2, n_head=4, attn_implementation=impl)
            model = GPT2LMHeadModel(cfg)
        else:
            cfg = LlamaConfig(
                vocab_size=64,
                hidden_size=16,
                intermediate_size=32,
                num_hidden_layers=2,
                num_attention_heads=4,
                num_key_value_heads=2,
                max_position_embeddings=64,
                attn_implementation=impl,
            )
            model = LlamaForCausalLM(cfg)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn_like(p) * 0.3)
        return model.eval()

    sdpa, eager = hf_model("sdpa"), hf_model("eager")
    ours = from_hf(sdpa).eval()
    ids = torch.randint(1, 64, (2, 8), generator=torch.Generator().manual_seed(5))
    ids[0, :3] = 0
    mask = (ids != 0).long()
    labels = ids.masked_fill(mask == 0, -100)
    positions = (mask.cumsum(-1) - 1).clamp_min(0)
    got = ours(ids, attention_mask=mask, labels=labels)
    with_sdpa = sdpa(ids, attention_mask=mask, position_ids=positions, labels=labels)
    with_eager = eager(ids, attention_mask=mask, position_ids=positions, labels=labels)
    torch.testing.assert_close(got.loss, with_sdpa.loss, atol=1e-6, rtol=1e-6)
    n = int((labels[:, 1:] != -100).sum())  # the terms averaged
    term = F.cross_entropy(got.logits[0, 2], ids[0, 3]) - F.cross_entropy(with_eager.logits[0, 2], ids[0, 3])
    assert abs(float(term.detach())) > 1e-2  # the eager kernel's row really differs ...
    torch.testing.assert_close(got.loss * n - with_eager.loss * n, term, atol=1e-4, rtol=0)  # ... by that term only
    labels[0, 3] = -100  # the first real token predicted by nothing: all three equal
    want = eager(ids, attention_mask=mask, position_ids=positions, labels=labels).loss
    torch.testing.assert_close(ours(ids, attention_mask=mask, labels=labels).loss, want, atol=1e-6, rtol=1e-6)
