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


# ------------------------------------------------------------------ generation_config.json's defaults, as HF reads them

GENERATION_FILES = [
    {"do_sample": True, "top_k": 5, "temperature": 1.5, "max_new_tokens": 7},
    {"do_sample": True, "top_p": 0.8, "max_length": 12},
    {"do_sample": True, "temperature": 0.7, "min_p": 0.1, "repetition_penalty": 1.3, "max_new_tokens": 9},
]


@pytest.fixture(scope="module")
def gpt2_weights():
    transformers = pytest.importorskip("transformers", reason="waits for transformers (pip install transformers)")
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(
        vocab_size=64, n_positions=64, n_embd=16, n_layer=2, n_head=4, bos_token_id=None, eos_token_id=None
    )
    return transformers, transformers.GPT2LMHeadModel(cfg).eval()


@pytest.mark.parametrize("defaults", GENERATION_FILES)
@pytest.mark.parametrize("kw", [{}, {"do_sample": False, "max_new_tokens": 6}, {"temperature": 0.5, "top_k": 3}])
def test_generation_config_json_sampling_defaults_are_read_as_transformers_reads_them(
    gpt2_weights, tmp_path, defaults, kw
):
    import json
    import warnings

    from anatomy.interop.hf import from_hf
    from anatomy.interop.safetensors_io import load_pretrained

    transformers, base = gpt2_weights
    base.save_pretrained(tmp_path)
    (tmp_path / "generation_config.json").write_text(json.dumps(defaults))
    hf = transformers.GPT2LMHeadModel.from_pretrained(tmp_path).eval()
    ids = torch.randint(0, 64, (2, 5), generator=torch.Generator().manual_seed(2))
    torch.manual_seed(1)
    want = hf.generate(ids, **kw)
    for ours in (load_pretrained(tmp_path), from_hf(hf)):  # a directory and a live model
        torch.manual_seed(1)  # no generator: the global RNG, as HF draws
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the file's sampling options under do_sample=False: named, ignored
            got = ours.generate(ids, **kw)
        assert torch.equal(got, want), (defaults, kw)


def test_generation_defaults_travel_through_our_checkpoints_and_back_to_transformers(gpt2_weights, tmp_path):
    import json

    from anatomy.interop.hf import to_hf
    from anatomy.interop.safetensors_io import load_pretrained, save_pretrained

    transformers, base = gpt2_weights
    base.save_pretrained(tmp_path / "hf")
    (tmp_path / "hf" / "generation_config.json").write_text(json.dumps(GENERATION_FILES[0]))
    ours = load_pretrained(tmp_path / "hf")
    assert ours.generation_config.do_sample is True and ours.generation_config.top_k == 5
    save_pretrained(ours, tmp_path / "ours")
    again = load_pretrained(tmp_path / "ours")
    assert again.generation_config == ours.generation_config
    back = to_hf(again).generation_config
    assert (back.do_sample, back.top_k, back.temperature, back.max_new_tokens) == (True, 5, 1.5, 7)
    plain = build_model(ModelConfig.from_preset("gpt2", n_layers=1, d_model=16, n_heads=2, vocab_size=32))
    save_pretrained(plain, tmp_path / "plain")  # nothing set beside the tokens: no file
    assert not (tmp_path / "plain" / "generation_config.json").exists()


def test_the_files_sampling_options_under_a_greedy_call_are_not_warned_about_but_the_callers_are(
    gpt2_weights, tmp_path
):
    import json
    import warnings

    from anatomy.interop.safetensors_io import load_pretrained

    _, base = gpt2_weights
    base.save_pretrained(tmp_path)
    (tmp_path / "generation_config.json").write_text(json.dumps(GENERATION_FILES[0]))
    ours = load_pretrained(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # as HF: the model's own defaults set aside without a word
        ours.generate(IDS, do_sample=False, max_new_tokens=2)
    with pytest.warns(UserWarning, match=r"generate ignores top_p=0.5: they do not shape greedy"):
        ours.generate(IDS, do_sample=False, top_p=0.5, max_new_tokens=2)


def test_options_the_file_sets_that_we_do_not_implement_are_refused_by_name_and_can_be_cleared(gpt2_weights, tmp_path):
    import json

    from anatomy.interop.safetensors_io import load_pretrained

    _, base = gpt2_weights
    base.save_pretrained(tmp_path)
    (tmp_path / "generation_config.json").write_text(json.dumps({"do_sample": True, "typical_p": 0.9}))
    ours = load_pretrained(tmp_path)
    with pytest.raises(ValueError, match=r"model.generation_config sets option\(s\) .*typical_p=0.9"):
        ours.generate(IDS, max_new_tokens=2)
    ours.generation_config.update(typical_p=None)
    assert ours.generate(IDS, max_new_tokens=2).shape == (2, 5)


def test_explicit_max_length_under_a_default_max_new_tokens_is_refused_as_transformers_would_overrule_it(model):
    from anatomy.generation.options import GenerationConfig

    saved = model.generation_config
    try:
        model.generation_config = GenerationConfig(max_new_tokens=4)
        assert model.generate(IDS).shape == (2, 7)
        assert model.generate(IDS, max_new_tokens=2).shape == (2, 5)  # explicit arguments win
        with pytest.raises(ValueError, match=r"max_length=6 \(the arguments\) under model.generation_config's"):
            model.generate(IDS, max_length=6)
        model.generation_config = GenerationConfig(max_length=6)
        assert model.generate(IDS, max_new_tokens=1).shape == (2, 4)  # max_new_tokens wins over a default length
    finally:
        model.generation_config = saved


def test_an_encoder_decoders_max_length_counts_its_decoder_tokens_as_in_hf():
    """HF's max_length counts a T5's decoder tokens (its start token included), not the source: max_length=6 on an
    8-token source gives 6 tokens. It was once measured from the source and refused as shorter than the prompt."""
    transformers = pytest.importorskip("transformers")
    from anatomy.interop.hf import from_hf

    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    config = transformers.T5Config(
        vocab_size=40, d_model=16, d_kv=4, d_ff=32, num_layers=1, num_heads=4, decoder_start_token_id=0, pad_token_id=0
    )
    hf = transformers.T5ForConditionalGeneration(config).eval()
    ours = from_hf(hf)
    src = torch.randint(2, 40, (1, 8), generator=torch.Generator().manual_seed(1))
    for length in (6, 12):
        want = hf.generate(src, max_length=length, eos_token_id=None)
        got = generate(ours, src, max_length=length, eos_token_id=None)
        assert want.shape == (1, length) and torch.equal(got, want)
