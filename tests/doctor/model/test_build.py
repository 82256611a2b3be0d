"""Building a model under the names people give its sizes, from a config class, a namespace, or its own."""

from __future__ import annotations

import dataclasses

import pytest

from anatomy.doctor import CheckError
from anatomy.doctor.model.build import Sizes, arguments, infer_sizes, make_config
from tests.doctor.model import nano_style


class _Positional:
    def __init__(self, a, b, c, d, e):
        pass


class _Named:
    def __init__(self, ntoken, emb_dim, nhead, nlayers, max_len, dropout, tie=True):
        pass


def test_keywords_under_their_usual_names_and_positions():
    s = Sizes()
    assert arguments(_Named, s, {}) == (
        [],
        {"ntoken": 29, "emb_dim": 16, "nhead": 4, "nlayers": 3, "max_len": 12, "dropout": 0.1},
    )
    assert arguments(_Positional, s, {}) == ([29, 16, 4, 3, 12], {})


def test_a_config_class_or_a_namespace():
    cfg = make_config(nano_style.GPTConfig, Sizes())
    assert dataclasses.asdict(cfg) == {
        "block_size": 12,
        "vocab_size": 29,
        "n_layer": 3,
        "n_head": 4,
        "n_embd": 16,
        "dropout": 0.0,
    }
    ns = make_config(None, Sizes())
    assert ns.dim == 16 and ns["n_layers"] == 3 and ns.norm_eps == 1e-5 and ns.model_type is None


def test_a_signature_no_rule_fits_is_one_line():
    class Odd:
        def __init__(self, width, depth_of_it, vocabulary_list):
            pass

    with pytest.raises(CheckError, match=r"cannot tell how to build it from \(width, depth_of_it, vocabulary_list\)"):
        arguments(Odd, Sizes(), {})


def test_sizes_read_back_from_the_model():
    model = nano_style.GPT(nano_style.GPTConfig(vocab_size=40, n_embd=24, n_head=3, n_layer=2, block_size=9))
    got = infer_sizes(model, Sizes(), 2)
    assert (got.vocab_size, got.d_model, got.n_heads, got.n_layers, got.block_size) == (40, 24, 3, 2, 9)


class _KVConfig:  # a plain config class whose key/value heads default above our n_heads (tiny-llm-zh, happy-llm)
    def __init__(self, vocab_size=6400, hidden_size=512, num_attention_heads=8, num_key_value_heads=8):
        self.vocab_size, self.hidden_size = vocab_size, hidden_size
        self.num_attention_heads, self.num_key_value_heads = num_attention_heads, num_key_value_heads


def test_key_value_heads_follow_our_n_heads():
    cfg = make_config(_KVConfig, Sizes())
    assert cfg.num_attention_heads == 4 and cfg.num_key_value_heads == 4


def test_a_position_table_with_an_offset_is_read_without_it():
    """OPT's and BART's learned positions keep two rows no position uses (``offset = 2``), fairseq's start after
    ``padding_idx``: the longest input is the table's length less those rows (reading 18 for a 16-position table
    made every probe at block_size fail)."""
    from torch import nn

    class Offset(nn.Embedding):
        def __init__(self, n, d):
            self.offset = 2
            super().__init__(n + self.offset, d)

    class LM(nn.Module):
        def __init__(self, positions):
            super().__init__()
            self.tok = nn.Embedding(40, 24)
            self.pos = positions
            self.head = nn.Linear(24, 40)

    assert infer_sizes(LM(Offset(16, 24)), Sizes(), 2).block_size == 16
    assert infer_sizes(LM(nn.Embedding(16 + 2, 24, padding_idx=1)), Sizes(), 2).block_size == 16
    assert infer_sizes(LM(nn.Embedding(16, 24)), Sizes(), 2).block_size == 16
