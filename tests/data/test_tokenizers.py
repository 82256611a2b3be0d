"""Character and byte-level BPE tokenizers, and the synthetic seq2seq tasks."""

from __future__ import annotations

import pytest
import torch

from anatomy.data import synthetic
from anatomy.data.tokenizers import BPETokenizer, CharTokenizer, UnknownCharactersError, load_tokenizer


def test_char_round_trip_and_unknown_characters_are_named(tmp_path):
    tok = CharTokenizer.train(["床前明月光", "疑是地上霜"])
    assert tok.vocab_size == 2 + 10 and tok.pad_id == 0 and tok.eos_id == 1
    assert tok.decode(tok.encode("明月光")) == "明月光"
    with pytest.raises(
        UnknownCharactersError,
        match=r"2 character\(s\) are not in the tokenizer's vocabulary: "
        r"'举' '头'",
    ) as err:
        tok.encode("举头望明月"[:2] + "明")
    assert err.value.chars == ["举", "头"]
    tok.save(tmp_path)
    again = load_tokenizer(tmp_path)
    assert again.itos == tok.itos and again.encode("地上霜") == tok.encode("地上霜")


def test_char_with_unk_maps_unseen_characters():
    tok = CharTokenizer.train(["abc"], unk=True)
    assert tok.encode("abz") == [tok.stoi["a"], tok.stoi["b"], tok.unk_id]
    assert tok.decode(tok.encode("abz")) == "ab"


def test_bpe_trains_offline_round_trips_and_saves_in_hf_format(tmp_path):
    texts = ["the cat sat on the mat", "the dog sat on the log", "床前明月光"] * 20
    tok = BPETokenizer.train(texts, vocab_size=300)
    assert tok.vocab_size <= 300 and tok.pad_id == 0 and tok.eos_id == 1
    for text in ("the cat", "unseen wörds ✓", "床前明月光"):
        assert tok.decode(tok.encode(text)) == text  # byte level: nothing is unknown
    tok.save(tmp_path)
    from tokenizers import Tokenizer

    hf = Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    assert hf.encode("the cat sat").ids == load_tokenizer(tmp_path).encode("the cat sat")
    with pytest.raises(ValueError, match="bpe_vocab must be at least 258"):
        BPETokenizer.train(texts, vocab_size=100)


@pytest.mark.parametrize("task, expect", [("copy", "dcab"), ("reverse", "bacd"), ("sort", "abcd")])
def test_synthetic_tasks(task, expect):
    assert synthetic.solve(task, "dcab") == expect
    pairs = synthetic.sample_pairs(task, torch.Generator().manual_seed(3), 50, min_len=2, max_len=5)
    assert pairs == synthetic.sample_pairs(task, torch.Generator().manual_seed(3), 50, min_len=2, max_len=5)
    assert all(2 <= len(s) <= 5 and t == synthetic.solve(task, s) for s, t in pairs)
    with pytest.raises(ValueError, match="unknown seq2seq task 'rot13'; valid names: copy, reverse, sort"):
        synthetic.solve("rot13", "ab")
