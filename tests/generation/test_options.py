"""``generate``'s options: contradictions are one ValueError naming both options; num_return_sequences and
max_length shape the output as in Hugging Face."""

from __future__ import annotations

import pytest
import torch

from anatomy import ModelConfig, build_model
from anatomy.generation import generate


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    m = build_model(
        ModelConfig.from_preset("gpt2", vocab_size=50, d_model=32, n_heads=4, n_layers=2, d_ff=64, max_seq_len=64)
    )
    with torch.no_grad():
        for p in m.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return m.eval()


IDS = torch.tensor([[4, 5, 6], [7, 8, 9]])


@pytest.mark.parametrize(
    "kw,named",
    [
        (dict(top_p=0.9), ["top_p=0.9", "greedy decoding"]),
        (dict(top_k=5), ["top_k=5", "greedy decoding"]),
        (dict(min_p=0.1), ["min_p=0.1", "greedy decoding"]),
        (dict(temperature=0.7, top_p=0.8), ["temperature=0.7, top_p=0.8", "greedy decoding"]),
        (dict(num_beams=4, top_p=0.9), ["top_p=0.9", "beam search (num_beams=4)"]),
        (dict(length_penalty=2.0), ["length_penalty=2.0", "greedy decoding"]),
        (dict(early_stopping=True), ["early_stopping=True", "greedy decoding"]),
    ],
)
def test_options_of_another_mode_are_warned_about_and_ignored_as_hf_does(model, kw, named):
    """HF's generate logs "The following generation flags are not valid and may be ignored" and runs without
    them: the tokens are those of the call without them."""
    with pytest.warns(UserWarning) as caught:
        got = generate(model, IDS, max_new_tokens=5, **kw)
    said = " ".join(str(w.message) for w in caught)
    for part in named:
        assert part in said, (part, said)
    plain = {k: v for k, v in kw.items() if k == "num_beams"}
    assert torch.equal(got, generate(model, IDS, max_new_tokens=5, **plain))


@pytest.mark.parametrize(
    "kw,named",
    [
        (dict(num_return_sequences=2), ["num_return_sequences=2", "greedy"]),
        (dict(num_beams=2, num_return_sequences=3), ["num_return_sequences=3", "num_beams=2"]),
        (dict(num_beams=2, do_sample=True), ["do_sample=True", "num_beams=2"]),
        (dict(num_beams=2, streamer=object()), ["streamer", "num_beams=2"]),
        (dict(max_new_tokens=3, max_length=9), ["max_new_tokens", "max_length"]),
        (dict(stop_strings="x"), ["stop_strings", "tokenizer"]),
        (dict(num_beams=0), ["num_beams must be a positive integer"]),
        (dict(do_sample=True, top_p=1.5), ["top_p must be in (0, 1]"]),
        (dict(repetition_penalty=0.0), ["repetition_penalty must be a number > 0"]),
        (dict(num_beams=2, early_stopping="sometimes"), ["early_stopping must be True, False or 'never'"]),
    ],
)
def test_contradictions_and_bad_values_name_the_options(model, kw, named):
    with pytest.raises(ValueError) as err:
        generate(model, IDS, **kw)
    for part in named:
        assert part in str(err.value), (part, str(err.value))


def test_temperature_one_and_defaults_are_not_contradictions(model):
    assert torch.equal(generate(model, IDS, max_new_tokens=4, temperature=1.0), generate(model, IDS, max_new_tokens=4))


def test_num_return_sequences_and_max_length_shapes(model):
    g = torch.Generator().manual_seed(0)
    out = generate(model, IDS, max_new_tokens=6, do_sample=True, num_return_sequences=3, generator=g)
    assert out.shape == (6, 9)
    assert torch.equal(out[:3, :3], IDS[:1].expand(3, -1)) and torch.equal(out[3:, :3], IDS[1:].expand(3, -1))
    assert len({tuple(r) for r in out[:3, 3:].tolist()}) > 1  # independent draws, not copies
    beams = generate(model, IDS, max_new_tokens=6, num_beams=3, num_return_sequences=2)
    assert beams.shape == (4, 9) and torch.equal(beams[::2], generate(model, IDS, max_new_tokens=6, num_beams=3))
    assert generate(model, IDS, max_length=7).shape == (2, 7)  # max_length counts the prompt
    s2s = build_model(
        ModelConfig.from_preset("t5", vocab_size=50, d_model=32, n_heads=4, n_layers=2, d_ff=64, max_seq_len=32)
    ).eval()
    assert generate(s2s, IDS, max_new_tokens=5, do_sample=True, num_return_sequences=2).shape == (4, 6)
