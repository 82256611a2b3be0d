"""HF's generate surface on our models, against transformers' own ``generate`` on the same weights: every logits
processor, ``return_dict_in_generate`` (sequences, processed scores, raw logits), ``generation_config=``, HF's own
processor and stopping-criteria objects, the mask inferred from ``pad_token_id``, ``inputs_embeds``, and stopping
at the model's eos by default. Tiny random GPT-2 and Llama built from transformers' config classes (no download)."""

from __future__ import annotations

import pytest
import torch

from anatomy.generation import GenerateOutput, GenerationConfig
from anatomy.generation.processors import BadWords, NoRepeatNGram

transformers = pytest.importorskip("transformers", reason="waits for transformers (pip install transformers)")
transformers.logging.set_verbosity_error()

from anatomy.interop.hf import from_hf  # noqa: E402

V = 60
IDS = torch.tensor([[0, 0, 0, 5, 6, 7, 8], [0, 11, 12, 13, 14, 15, 16], [21, 22, 23, 24, 25, 26, 27]])
MASK = (torch.arange(7)[None, :] >= torch.tensor([[3], [1], [0]])).long()  # left padding of rows 0 and 1


def _perturb(model):
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=g))
    return model.eval()


def _gpt2(**kw):
    torch.manual_seed(0)
    return _perturb(
        transformers.GPT2LMHeadModel(
            transformers.GPT2Config(n_layer=2, n_embd=32, n_head=4, vocab_size=V, n_positions=64, **kw)
        )
    )


def _llama(**kw):
    torch.manual_seed(0)
    return _perturb(
        transformers.LlamaForCausalLM(
            transformers.LlamaConfig(
                num_hidden_layers=2,
                hidden_size=32,
                num_attention_heads=4,
                num_key_value_heads=2,
                intermediate_size=64,
                vocab_size=V,
                max_position_embeddings=64,
                **kw,
            )
        )
    )


def _eos_inside(hf) -> int:
    """A token HF's greedy continuation of row 2 emits at its 4th new token: an eos that ends generation early."""
    out = hf.generate(IDS[2:], max_new_tokens=12, do_sample=False, eos_token_id=None, pad_token_id=0)
    return int(out[0, 7 + 3])


@pytest.fixture(scope="module", params=["gpt2", "llama"])
def pair(request):
    hf = (_gpt2 if request.param == "gpt2" else _llama)()
    eos = _eos_inside(hf)
    hf.generation_config.eos_token_id = eos
    hf.generation_config.pad_token_id = 0
    hf.config.eos_token_id, hf.config.pad_token_id = eos, 0
    return hf, from_hf(hf), eos


def _both(hf, ours, **kw):
    want = hf.generate(IDS, attention_mask=MASK, **kw)
    got = ours.generate(IDS, attention_mask=MASK, **kw)
    return want, got


def _same_scores(want, got) -> None:
    """Step by step: -inf where HF has -inf, else within float32 round-off of the two models' logits."""
    assert len(want) == len(got) > 0
    for a, b in zip(want, got, strict=True):
        assert a.shape == b.shape and a.dtype == b.dtype == torch.float32
        assert torch.equal(torch.isinf(a), torch.isinf(b))
        finite = torch.isfinite(a)
        assert (a[finite] - b[finite]).abs().max().item() < 1e-4


PROCESSORS = {
    "no_repeat_ngram": dict(no_repeat_ngram_size=2),
    "bad_words": dict(bad_words_ids="from the free run"),
    "min_new_tokens": dict(min_new_tokens=6),
    "min_length": dict(min_length=12),
    "suppress_tokens": dict(suppress_tokens=[1, 2, 3, 17]),
    "repetition_penalty": dict(repetition_penalty=1.4),
    "all_together": dict(
        no_repeat_ngram_size=3, bad_words_ids=[[9]], min_new_tokens=3, suppress_tokens=[4], repetition_penalty=1.2
    ),
}


@pytest.mark.parametrize("name", PROCESSORS)
def test_each_processor_and_the_returned_dict_equal_hfs(pair, name):
    hf, ours, eos = pair
    options = dict(PROCESSORS[name])
    plain = ours.generate(IDS, attention_mask=MASK, max_new_tokens=14)
    if name == "bad_words":  # a token the free run emits first, and a two-token sequence it emits later
        new = plain[:, 7:].tolist()
        options["bad_words_ids"] = [[new[2][0]], new[1][2:4], [eos]]  # eos alone: dropped, as HF drops it
    kw = dict(
        max_new_tokens=14,
        do_sample=False,
        return_dict_in_generate=True,
        output_scores=True,
        output_logits=True,
        **options,
    )
    want, got = _both(hf, ours, **kw)
    assert isinstance(got, GenerateOutput) and set(got.keys()) == set(want.keys()) == {
        "sequences",
        "scores",
        "logits",
        "cache",
    }
    assert torch.equal(got.sequences, want.sequences), (got.sequences, want.sequences)
    _same_scores(want.scores, got.scores)
    _same_scores(want.logits, got.logits)
    if name in ("no_repeat_ngram", "bad_words", "suppress_tokens"):  # the processor changed something
        assert not torch.equal(plain, got.sequences)


def test_processors_change_the_greedy_tokens_where_they_should(pair):
    """The cases above bite: without them some banned n-gram, word or early eos does occur."""
    hf, ours, eos = pair
    free = ours.generate(IDS, attention_mask=MASK, max_new_tokens=14, eos_token_id=None)
    rows = free[:, 7:].tolist()
    assert any(len({tuple(r[i : i + 2]) for i in range(len(r) - 1)}) < len(r) - 1 for r in rows)  # repeated bigram
    assert any(eos in r[:6] for r in rows)  # an eos min_new_tokens holds back


def test_sampling_draws_equal_hfs_for_the_same_seed(pair):
    hf, ours, _ = pair
    kw = dict(max_new_tokens=10, do_sample=True, temperature=0.7, top_k=20, top_p=0.9, no_repeat_ngram_size=2)
    torch.manual_seed(3)
    want = hf.generate(IDS, attention_mask=MASK, **kw)
    torch.manual_seed(3)
    got = ours.generate(IDS, attention_mask=MASK, **kw)
    assert torch.equal(got, want)
    torch.manual_seed(4)
    assert not torch.equal(ours.generate(IDS, attention_mask=MASK, **kw), want)  # the seed matters


def test_sampling_without_top_k_keeps_hfs_default_of_50(pair):
    """HF samples from the 50 likeliest tokens when top_k is not given (its global default): so do we. V = 60,
    so the default cuts 10 tokens and a draw without it differs."""
    hf, ours, _ = pair
    kw = dict(max_new_tokens=12, do_sample=True, temperature=2.0, eos_token_id=None)
    torch.manual_seed(5)
    want = hf.generate(IDS, attention_mask=MASK, **kw)
    torch.manual_seed(5)
    assert torch.equal(ours.generate(IDS, attention_mask=MASK, **kw), want)
    torch.manual_seed(5)
    uncut = ours.generate(IDS, attention_mask=MASK, top_k=0, **kw)  # HF's way to turn the cut off
    torch.manual_seed(5)
    assert torch.equal(uncut, hf.generate(IDS, attention_mask=MASK, top_k=0, **kw)) and not torch.equal(uncut, want)


def test_no_length_given_is_hfs_20_new_tokens_with_a_warning(pair):
    hf, ours, _ = pair
    long = torch.randint(1, V, (1, 25), generator=torch.Generator().manual_seed(1))  # longer than 20: still 20 new
    for ids in (IDS[2:], long):
        with pytest.warns(UserWarning, match="max_new_tokens"):
            got = ours.generate(ids, eos_token_id=None)
        want = hf.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, eos_token_id=None)
        assert got.shape[1] == ids.shape[1] + 20 and torch.equal(got, want)


def test_hfs_own_processor_and_criteria_objects_work(pair):
    hf, ours, eos = pair
    procs = transformers.LogitsProcessorList(
        [transformers.NoRepeatNGramLogitsProcessor(2), transformers.SuppressTokensLogitsProcessor([9, 10])]
    )
    stops = transformers.StoppingCriteriaList([transformers.MaxLengthCriteria(max_length=7 + 5)])
    kw = dict(max_new_tokens=14, do_sample=False, logits_processor=procs, stopping_criteria=stops, eos_token_id=None)
    want, got = _both(hf, ours, **kw)
    assert torch.equal(got, want) and got.shape[1] == 7 + 5
    # our processors in HF's generate: the same tokens as HF's own
    kw = dict(max_new_tokens=14, do_sample=False, eos_token_id=None)
    mine = transformers.LogitsProcessorList([NoRepeatNGram(2), BadWords([[9], [30, 31]], [])])
    theirs = hf.generate(IDS, attention_mask=MASK, logits_processor=mine, **kw)
    assert torch.equal(
        theirs, hf.generate(IDS, attention_mask=MASK, no_repeat_ngram_size=2, bad_words_ids=[[9], [30, 31]], **kw)
    )


def test_generation_config_ours_or_hfs_with_hfs_precedence(pair):
    hf, ours, eos = pair
    config = transformers.GenerationConfig(max_new_tokens=9, no_repeat_ngram_size=2, do_sample=False)
    want = hf.generate(IDS, attention_mask=MASK, generation_config=config)
    assert torch.equal(ours.generate(IDS, attention_mask=MASK, generation_config=config), want)
    ours_config = GenerationConfig(max_new_tokens=9, no_repeat_ngram_size=2)
    assert torch.equal(ours.generate(IDS, attention_mask=MASK, generation_config=ours_config), want)
    # keyword arguments win over the config; the model's generation_config fills what the config leaves unset
    want = hf.generate(IDS, attention_mask=MASK, generation_config=config, max_new_tokens=4)
    assert torch.equal(ours.generate(IDS, attention_mask=MASK, generation_config=config, max_new_tokens=4), want)
    assert ours.generation_config.eos_token_id == eos and ours.generation_config.pad_token_id == 0
    with pytest.raises(ValueError, match="typical_p=0.5"):
        ours.generate(IDS, generation_config=transformers.GenerationConfig(typical_p=0.5, do_sample=True))


def test_generation_stops_at_the_models_eos_by_default_as_hfs(pair):
    hf, ours, eos = pair
    want = hf.generate(IDS, attention_mask=MASK, max_new_tokens=12, do_sample=False)
    got = ours.generate(IDS, attention_mask=MASK, max_new_tokens=12)
    assert torch.equal(got, want)
    assert (got[:, 7:] == eos).any(dim=1).sum() >= 1 and (got[2, 7:] == eos).any()  # rows ended at eos
    never = ours.generate(IDS, attention_mask=MASK, max_new_tokens=12, eos_token_id=None)
    assert never.shape[1] == 7 + 12
    assert torch.equal(
        never, hf.generate(IDS, attention_mask=MASK, max_new_tokens=12, do_sample=False, eos_token_id=None)
    )


@pytest.mark.parametrize("pad_is_eos", [False, True])
def test_a_missing_mask_is_inferred_from_the_pad_id_by_hfs_rule(pair, pad_is_eos):
    hf, ours, eos = pair
    pad = eos if pad_is_eos else 0
    ids = IDS.masked_fill(MASK == 0, pad)
    kw = dict(max_new_tokens=8, do_sample=False, pad_token_id=pad, eos_token_id=eos)
    want = hf.generate(ids, **kw)
    got = ours.generate(ids, **kw)
    assert torch.equal(got, want)
    with_mask = ours.generate(ids, attention_mask=MASK, **kw)
    # pad != eos: inferred, the same as with the mask; pad == eos: HF cannot tell, every token is attended to
    assert torch.equal(got, with_mask) != pad_is_eos


def test_inputs_embeds_gives_hfs_new_tokens(pair):
    hf, ours, eos = pair
    embeds = hf.get_input_embeddings()(IDS[2:]).detach()  # (1, 7, D)
    kw = dict(max_new_tokens=8, do_sample=False, eos_token_id=None, no_repeat_ngram_size=2)
    want = hf.generate(inputs_embeds=embeds, **kw)
    got = ours.generate(inputs_embeds=embeds, **kw)
    assert got.shape == (1, 8) and torch.equal(got, want)
    with pytest.raises(ValueError, match="inputs_embeds must be"):
        ours.generate(inputs_embeds=embeds[0])


def test_temperature_and_top_p_under_greedy_warn_and_are_ignored_as_hf(pair):
    hf, ours, _ = pair
    want = hf.generate(IDS, attention_mask=MASK, max_new_tokens=6, do_sample=False, temperature=0.3, top_p=0.5)
    with pytest.warns(UserWarning, match="temperature=0.3, top_p=0.5"):
        got = ours.generate(IDS, attention_mask=MASK, max_new_tokens=6, do_sample=False, temperature=0.3, top_p=0.5)
    assert torch.equal(got, want)
