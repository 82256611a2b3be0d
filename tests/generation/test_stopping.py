"""Stop strings: the overlap rule on hand-made token sequences, and the same tokens as Hugging Face's
``generate(stop_strings=..., tokenizer=...)`` on a tiny GPT-2 with a local tokenizer whose tokens are several
characters long, so that stop strings start and end inside tokens."""

from __future__ import annotations

import os

import pytest
import torch

from anatomy.generation import StopStrings, generate

os.environ.setdefault("HF_HUB_OFFLINE", "1")


class Pieces:
    """A tokenizer whose token i decodes to PIECES[i]."""

    def __init__(self, pieces):
        self.pieces = pieces

    def decode(self, ids):
        return "".join(self.pieces[i] for i in ids)


PIECES = list("abcdefghijklmnopqrstuvwxyz .,!") + [
    "st",
    "op",
    "sto",
    "pper",
    "las",
    "topper",
    "to",
    "pped",
    "the",
    "cat",
    "ing",
    "er",
    "on",
    "an",
    "in",
    "abcdef",
]
PIECES += [f"w{i}" for i in range(100 - len(PIECES))]  # ("abcdef": the probe HF's stop-string matcher encodes)
TOK = Pieces(PIECES)


def _ids(*pieces):
    return [PIECES.index(p) for p in pieces]


@pytest.mark.parametrize(
    "pieces",
    [
        ("st", "op"),
        ("sto", "p"),
        ("st", "op", "e", "r"),
        ("sto", "pper"),
        ("las", "topper"),
        ("s", "to", "pped"),
        ("a", "s", "t", "op"),
    ],
)
def test_a_stop_string_that_reaches_the_newest_token_matches(pieces):
    if pieces[-2:] == ("e", "r"):  # "stoper": the match ended two tokens ago, so it no longer counts
        assert not StopStrings("stop", TOK).matches(_ids(*pieces))
        assert StopStrings("stop", TOK).matches(_ids(*pieces[:2]))
        return
    assert StopStrings(["xyz", "stop"], TOK).matches(_ids(*pieces))


def test_no_match_and_bad_arguments():
    stop = StopStrings("stop", TOK)
    assert not stop.matches(_ids("st", "o")) and not stop.matches([]) and not stop.matches(_ids("to", "p"))
    with pytest.raises(ValueError, match="stop_strings must be a non-empty string"):
        StopStrings(["", "a"], TOK)
    with pytest.raises(ValueError, match="needs tokenizer="):
        StopStrings("a", None)


@pytest.fixture(scope="module")
def models():
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    from tokenizers import Tokenizer, decoders
    from tokenizers.models import WordLevel
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    from anatomy.interop.hf import from_hf

    raw = Tokenizer(WordLevel({p: i for i, p in enumerate(PIECES)}, unk_token="a"))
    raw.decoder = decoders.Fuse()  # decode = the pieces joined, as TOK does
    torch.manual_seed(0)
    hf = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=32, n_head=4, vocab_size=100, n_positions=64))
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in hf.parameters():
            p.add_(0.2 * torch.randn(p.shape, generator=g))
    return hf.eval(), from_hf(hf.eval()), PreTrainedTokenizerFast(tokenizer_object=raw)


IDS = torch.randint(3, 100, (3, 9), generator=torch.Generator().manual_seed(1))


def test_stop_strings_give_hf_generates_tokens(models):
    hf, ours, tokenizer = models
    stops = ["atv", "gw1", "vxi"]  # each ends inside or across tokens of one row's greedy continuation
    kw = dict(max_new_tokens=30, pad_token_id=7, stop_strings=stops, tokenizer=tokenizer)
    want = hf.generate(IDS, do_sample=False, **kw)
    got = generate(ours, IDS, **kw)
    assert torch.equal(got, want)
    free = generate(ours, IDS, max_new_tokens=30)
    assert got.shape[1] < free.shape[1]  # every row stopped early
    for row in range(3):
        text = TOK.decode(got[row, 9:].tolist())
        n = next(i for i in range(1, 31) if any(s in TOK.decode(free[row, 9 : 9 + i].tolist()) for s in stops))
        assert got[row, 9 : 9 + n].tolist() == free[row, 9 : 9 + n].tolist()  # the same tokens up to the stop
        assert (got[row, 9 + n :] == 7).all() and any(s in text for s in stops)  # then padding
    assert torch.equal(ours.generate(IDS, **kw), got)  # the model method takes them too
    beams = dict(kw, num_beams=4)
    assert torch.equal(generate(ours, IDS, **beams), hf.generate(IDS, do_sample=False, **beams))
