"""Streaming: ``generate`` calls a streamer as Hugging Face's does (prompt, then one put per token, then end), so
HF's ``TextStreamer`` and our ``TerminalStreamer`` print the text that is returned."""

from __future__ import annotations

import io

import pytest
import torch

from anatomy import ModelConfig, build_model
from anatomy.generation import TerminalStreamer, generate


class Chars:
    def decode(self, ids):
        return "".join(chr(97 + i % 26) for i in ids)


class Recorder:
    def __init__(self):
        self.calls = []

    def put(self, value):
        self.calls.append(("put", value.tolist()))

    def end(self):
        self.calls.append(("end", None))


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    m = build_model(
        ModelConfig.from_preset(
            "llama", vocab_size=50, d_model=32, n_heads=4, n_kv_heads=2, n_layers=2, d_ff=64, max_seq_len=64
        )
    )
    with torch.no_grad():
        for p in m.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return m.eval()


def test_the_streamer_protocol_is_hfs(model):
    ids = torch.tensor([[3, 4, 5]])
    rec = Recorder()
    out = generate(model, ids, max_new_tokens=6, streamer=rec)
    assert rec.calls[0] == ("put", [[3, 4, 5]]) and rec.calls[-1] == ("end", None)
    assert [c[1] for c in rec.calls[1:-1]] == [[t] for t in out[0, 3:].tolist()]


def test_terminal_streamer_prints_the_returned_text(model):
    ids = torch.tensor([[3, 4, 5]])
    buf = io.StringIO()
    out = generate(model, ids, max_new_tokens=12, streamer=TerminalStreamer(Chars(), file=buf))
    assert buf.getvalue() == Chars().decode(out[0, 3:].tolist()) and len(buf.getvalue()) == 12
    with pytest.raises(ValueError, match="prints one sequence; got a batch of 2"):
        generate(
            model,
            torch.tensor([[1, 2], [3, 4]]),
            max_new_tokens=2,
            streamer=TerminalStreamer(Chars(), file=io.StringIO(), skip_prompt=False),
        )


def test_hfs_text_streamer_works_with_our_generate(model, capsys):
    transformers = pytest.importorskip("transformers")
    from tokenizers import Tokenizer, decoders
    from tokenizers.models import WordLevel

    raw = Tokenizer(WordLevel({chr(97 + i % 26) + ("" if i < 26 else str(i)): i for i in range(50)}, unk_token="a"))
    raw.decoder = decoders.Fuse()
    tok = transformers.PreTrainedTokenizerFast(tokenizer_object=raw)
    out = generate(
        model, torch.tensor([[3, 4, 5]]), max_new_tokens=8, streamer=transformers.TextStreamer(tok, skip_prompt=True)
    )
    assert capsys.readouterr().out.strip() == tok.decode(out[0, 3:]).strip()
