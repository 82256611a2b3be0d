"""anatomy.inspection.tl_tokens: to_tokens, to_string and to_str_tokens against TransformerLens 4.3's bridge with the
same tokenizer (the ``tl_pair`` fixture of conftest.py), a transformers tokenizer set by hand, and the refusal
without a tokenizer."""

from __future__ import annotations

import pytest

import anatomy

transformers = pytest.importorskip("transformers", reason="waits for transformers (pip install transformers)")
pytest.importorskip("transformer_lens", reason="waits for transformer-lens (pip install transformer-lens)")


@pytest.fixture(scope="module")
def pair(tl_pair):
    return tl_pair


@pytest.mark.parametrize(
    "args, kwargs",
    [
        (("the cat sat",), {}),
        ((["the cat", "the cat sat on mat"],), {}),
        (("the cat",), {"prepend_bos": False}),
        ((["the cat", "the cat sat on mat"],), {"padding_side": "left"}),
    ],
)
def test_to_tokens_equals_transformer_lens(pair, args, kwargs):
    ours, bridge, _ = pair
    assert ours.to_tokens(*args, **kwargs).tolist() == bridge.to_tokens(*args, **kwargs).tolist()


def test_to_string_and_to_str_tokens_equal_transformer_lens(pair):
    ours, bridge, _ = pair
    ids = bridge.to_tokens(["the cat", "the cat sat on mat"])
    assert ours.to_string(ids) == bridge.to_string(ids) == ["<s> the cat <pad> <pad> <pad>", "<s> the cat sat on mat"]
    assert ours.to_string(ids[1]) == bridge.to_string(ids[1])
    assert ours.to_string(ids[1].tolist()) == bridge.to_string(ids[1].tolist())
    for value in ("the cat sat", ids[1], ids[1:], ["the cat", "sat"]):
        assert ours.to_str_tokens(value) == bridge.to_str_tokens(value)
    assert ours.to_str_tokens("the cat", prepend_bos=False) == ["the", "cat"]
    assert ours.to_single_token("cat") == bridge.to_single_token("cat") == 5
    with pytest.raises(ValueError, match=r"'the cat' is 2 tokens"):
        ours.to_single_token("the cat")


def test_a_transformers_tokenizer_set_by_hand_works_the_same(pair):
    from anatomy.interop.hf import from_hf

    ours, bridge, _ = pair
    live = from_hf(transformers.GPT2LMHeadModel.from_pretrained(ours.hf_dir))
    live.tokenizer = transformers.AutoTokenizer.from_pretrained(ours.hf_dir)
    texts = ["the cat", "the cat sat on mat"]
    for kwargs in ({}, {"prepend_bos": False}, {"padding_side": "left"}):
        assert live.to_tokens(texts, **kwargs).tolist() == bridge.to_tokens(texts, **kwargs).tolist()
    ids = bridge.to_tokens(texts)
    assert live.to_string(ids) == bridge.to_string(ids)
    assert live.to_str_tokens("the cat sat") == bridge.to_str_tokens("the cat sat")


def test_token_calls_without_a_tokenizer_name_the_missing_tokenizer():
    model = anatomy.build_model(anatomy.ModelConfig.from_preset("gpt2", n_layers=1, d_model=16, n_heads=2))
    for call, arg in (("to_tokens", "hi"), ("to_string", [1, 2]), ("to_str_tokens", "hi")):
        with pytest.raises(ValueError, match=rf"{call} needs the model's tokenizer.*set model.tokenizer"):
            getattr(model, call)(arg)
