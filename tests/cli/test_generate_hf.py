"""``anatomy generate`` on a converted Hugging Face GPT-2 with its own byte-level BPE tokenizer (built offline): it
stops where HF's ``generate`` stops (the model's eos), shows the eos, says why each output stopped, ``--eos none``
and ``--stop "<|endoftext|>"`` work, and HF's generate on the model ``convert --to-hf`` wrote stops there too."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from anatomy.cli.main import main

transformers = pytest.importorskip("transformers", reason="waits for transformers (pip install transformers)")
transformers.logging.set_verbosity_error()
transformers.utils.logging.disable_progress_bar()

EOT = "<|endoftext|>"
PROMPT = "the quick"


def _bpe():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=[EOT], show_progress=False, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(["hello world, the quick brown fox jumps over the lazy dog. " * 20], trainer=trainer)
    return tok


def _hf_greedy(model, tok, prompt: str, n: int, **kw) -> list[int]:
    ids = torch.tensor([tok(prompt)["input_ids"]])
    return model.generate(ids, max_new_tokens=n, do_sample=False, **kw)[0, ids.shape[1] :].tolist()


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
    """A tiny GPT-2 whose greedy continuation of PROMPT emits <|endoftext|> (id 0) after a few tokens: the tied
    embedding row 0 is set to 1.05 x the row of a token the free run emits at its 6th step, so 0 wins there."""
    d = tmp_path_factory.mktemp("hf") / "gpt2"
    fast = transformers.GPT2TokenizerFast(tokenizer_object=_bpe(), eos_token=EOT, bos_token=EOT, unk_token=EOT)
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(
        transformers.GPT2Config(
            n_layer=2, n_embd=32, n_head=4, vocab_size=len(fast), n_positions=64, bos_token_id=0, eos_token_id=0
        )
    ).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.2)
        free = _hf_greedy(model, fast, PROMPT, 30, eos_token_id=None)
        model.transformer.wte.weight[0] = 1.05 * model.transformer.wte.weight[free[5]]
    new = _hf_greedy(model, fast, PROMPT, 30, eos_token_id=None)
    assert 0 in new[2:12] and 0 not in new[:2] and len(set(new)) > 3, new  # checked with transformers alone
    model.save_pretrained(d)
    fast.save_pretrained(d)
    return d


@pytest.fixture(scope="module")
def ours(hf_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("ours") / "gpt2"
    assert main(["convert", "--from-hf", str(hf_dir), "--out", str(out)]) == 0
    return out


def _gen(capsys, ckpt, *argv):
    code = main(["generate", "--checkpoint", str(ckpt), "--prompt", PROMPT, *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_generate_stops_at_the_eos_where_hf_stops_and_shows_it(hf_dir, ours, capsys):
    tok = transformers.AutoTokenizer.from_pretrained(hf_dir)
    model = transformers.GPT2LMHeadModel.from_pretrained(hf_dir).eval()
    want = _hf_greedy(model, tok, PROMPT, 30)  # HF stops at the config's eos 0
    assert want[-1] == 0 and len(want) < 30
    code, out, err = _gen(capsys, ours, "--greedy", "--max-new-tokens", "30")
    assert code == 0
    assert out == PROMPT + tok.decode(want) + "\n" and out.rstrip("\n").endswith(EOT)
    assert err.strip() == f"prompt 1/1: stopped: eos {EOT!r} (id 0) after {len(want)} tokens"
    code, out, _ = _gen(capsys, ours, "--greedy", "--max-new-tokens", "30", "--format", "json")
    row = json.loads(out)[0]
    assert row["outputs"] == [PROMPT + tok.decode(want)] and row["stopped"][0].startswith("eos")


def test_eos_none_goes_on_and_a_stop_string_of_special_text_stops(hf_dir, ours, capsys):
    tok = transformers.AutoTokenizer.from_pretrained(hf_dir)
    model = transformers.GPT2LMHeadModel.from_pretrained(hf_dir).eval()
    free = _hf_greedy(model, tok, PROMPT, 20, eos_token_id=None)
    code, out, err = _gen(capsys, ours, "--greedy", "--max-new-tokens", "20", "--eos", "none")
    assert code == 0 and out == PROMPT + tok.decode(free) + "\n" and EOT in out
    assert "stopped: --max-new-tokens 20 reached" in err
    at = free.index(0) + 1
    code, out, err = _gen(capsys, ours, "--greedy", "--max-new-tokens", "20", "--eos", "none", "--stop", EOT)
    assert code == 0 and out == PROMPT + tok.decode(free[:at]) + "\n"
    assert f"stopped: --stop {EOT!r} after {at} tokens" in err
    other = free[1]  # --eos ID: another token ends it
    code, out, err = _gen(capsys, ours, "--greedy", "--max-new-tokens", "20", "--eos", str(other))
    assert out == PROMPT + tok.decode(free[: free.index(other) + 1]) + "\n" and f"(id {other})" in err
    code, _, err = _gen(capsys, ours, "--greedy", "--eos", "99999")
    assert code == 2 and "--eos 99999" in err and "outside the vocabulary" in err


def test_to_hf_writes_the_models_tokens_and_hfs_generate_stops_there(hf_dir, ours, tmp_path, capsys):
    back = tmp_path / "back"
    assert main(["convert", "--to-hf", str(ours), "--out", str(back)]) == 0
    capsys.readouterr()
    written = json.loads((back / "config.json").read_text())
    assert (written["bos_token_id"], written["eos_token_id"], written.get("pad_token_id")) == (0, 0, None)
    generation = json.loads((back / "generation_config.json").read_text())
    assert (generation["bos_token_id"], generation["eos_token_id"]) == (0, 0)
    tok = transformers.AutoTokenizer.from_pretrained(hf_dir)
    original = transformers.GPT2LMHeadModel.from_pretrained(hf_dir).eval()
    written_model = transformers.GPT2LMHeadModel.from_pretrained(back).eval()
    assert _hf_greedy(written_model, tok, PROMPT, 30) == _hf_greedy(original, tok, PROMPT, 30)


def test_stream_gives_the_batch_paths_samples_with_a_header_per_prompt(ours, tmp_path, capsys):
    prompts = tmp_path / "p.txt"
    prompts.write_text("the quick\nhello\nthe lazy dog\n", encoding="utf-8")
    args = [
        "generate",
        "--checkpoint",
        str(ours),
        "--prompts-file",
        str(prompts),
        "--max-new-tokens",
        "12",
        "--seed",
        "5",
        "--eos",
        "none",
    ]
    assert main(args) == 0
    batch = capsys.readouterr()
    assert main([*args, "--stream"]) == 0
    streamed = capsys.readouterr()
    assert streamed.out == batch.out and batch.out.count("--- prompt ") == 3
    assert streamed.err == batch.err
    assert main([*args[:-2], "--seed", "6"]) == 0
    assert capsys.readouterr().out != batch.out  # the seed matters


def test_convert_verify_compares_the_tokens_ids_and_a_greedy_generation(hf_dir, tmp_path, capsys):
    code = main(["convert", "--from-hf", str(hf_dir), "--out", str(tmp_path / "o"), "--verify"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "special tokens (bos, eos, pad): ours (0, 0, None), HF (0, 0, None): equal" in out
    assert "token ids: 3 of 3 sample texts encode the same as AutoTokenizer" in out
    line = next(x for x in out.splitlines() if x.startswith("greedy generation"))
    assert line.endswith(": equal") and "ours [" in line
    assert out.rstrip().splitlines()[-1].startswith("OK: float32 logits")


def test_convert_verify_stays_greedy_when_the_generation_config_asks_for_sampling(hf_dir, tmp_path, capsys):
    """generation_config.json's sampling defaults now reach our model (docs/generation.md): --verify compares greedy
    tokens on both sides, never one side's samples with the other's arg-max."""
    sampled = tmp_path / "sampled"
    shutil.copytree(hf_dir, sampled)
    config = json.loads((sampled / "generation_config.json").read_text())
    (sampled / "generation_config.json").write_text(json.dumps({**config, "do_sample": True, "top_k": 5}))
    code = main(["convert", "--from-hf", str(sampled), "--out", str(tmp_path / "o"), "--verify"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert next(x for x in out.splitlines() if x.startswith("greedy generation")).endswith(": equal")
    assert json.loads((tmp_path / "o" / "generation_config.json").read_text()) == {"do_sample": True, "top_k": 5}


def _with_generation_config(hf_dir, tmp_path, values) -> object:
    d = tmp_path / "with-config"
    shutil.copytree(hf_dir, d)
    (d / "generation_config.json").write_text(json.dumps(values))
    return d


def _hf_default(d, **kw) -> list[int]:
    """HF's generate with the directory's generation_config.json as its defaults, as from_pretrained loads it."""
    tok = transformers.AutoTokenizer.from_pretrained(d)
    model = transformers.GPT2LMHeadModel.from_pretrained(d).eval()
    ids = torch.tensor([tok(PROMPT)["input_ids"]])
    return model.generate(ids, attention_mask=torch.ones_like(ids), **kw)[0, ids.shape[1] :].tolist()


def test_generation_config_json_gives_the_defaults_hfs_generate_takes(hf_dir, tmp_path, capsys):
    """A list of eos ids, do_sample false, max_new_tokens 7 and a repetition penalty in generation_config.json:
    the CLI (on the HF directory and on its conversion) and load_pretrained(...).generate give HF's tokens and
    stop where HF stops; the CLI says which of the file's options it used. (It once sampled 200 tokens.)"""
    from anatomy import load_pretrained

    base = {"bos_token_id": 0, "do_sample": False, "max_new_tokens": 7, "repetition_penalty": 1.3}
    free = _hf_default(_with_generation_config(hf_dir, tmp_path / "a", {**base, "eos_token_id": [0]}))
    stop = next(t for i, t in enumerate(free) if i >= 2 and t not in free[:i] and t != 0)
    d = _with_generation_config(hf_dir, tmp_path / "b", {**base, "eos_token_id": [0, stop]})
    want = _hf_default(d)
    assert want[-1] == stop and len(want) < 7 and want == free[: len(want)]  # the second eos ends it early
    tok = transformers.AutoTokenizer.from_pretrained(d)
    ids = torch.tensor([tok(PROMPT)["input_ids"]])
    assert load_pretrained(d).generate(ids)[0, ids.shape[1] :].tolist() == want
    converted = tmp_path / "converted"
    assert main(["convert", "--from-hf", str(d), "--out", str(converted)]) == 0
    capsys.readouterr()
    for ckpt in (d, converted):
        code, out, err = _gen(capsys, ckpt)
        assert code == 0, err
        assert out == PROMPT + tok.decode(want) + "\n"
        lines = err.strip().splitlines()
        assert lines[0] == (
            f"{ckpt / 'generation_config.json'}: do_sample=false, max_new_tokens=7, repetition_penalty=1.3 "
            "(a flag overrides each)"
        )
        assert lines[-1] == f"prompt 1/1: stopped: eos {tok.decode([stop])!r} (id {stop}) after {len(want)} tokens"
    assert _hf_default(d, max_new_tokens=2) == want[:2]  # a flag overrides the file, as an argument does in HF
    code, out, err = _gen(capsys, d, "--max-new-tokens", "2")
    assert out == PROMPT + tok.decode(want[:2]) + "\n" and "max_new_tokens=7" not in err


def test_a_generation_config_json_without_a_decoding_mode_takes_hfs_defaults(hf_dir, tmp_path, capsys):
    """The generation_config.json transformers writes (tokens only): what it leaves unset takes HF's
    GenerationConfig defaults, as in HF's generate: greedy, max_length 20 read as 20 new tokens (cut at the
    positions), temperature 1.0 when sampling. The CLI once sampled at temperature 0.8 for 200 tokens."""
    d = tmp_path / "hf"
    shutil.copytree(hf_dir, d)
    assert "do_sample" not in json.loads((d / "generation_config.json").read_text())
    tok = transformers.AutoTokenizer.from_pretrained(d)
    line = (
        f"{d / 'generation_config.json'}: sets no decoding option, so Hugging Face's GenerationConfig defaults "
        "apply: do_sample=false, max_length=20 (20 new tokens) (a flag overrides each)"
    )
    want = _hf_default(d)  # greedy, stops at the file's eos 0
    assert want[-1] == 0 and len(want) < 20
    code, out, err = _gen(capsys, d)
    assert code == 0, err
    assert out == PROMPT + tok.decode(want) + "\n"
    assert err.strip().splitlines() == [line, f"prompt 1/1: stopped: eos {EOT!r} (id 0) after {len(want)} tokens"]
    want = _hf_default(d, eos_token_id=None)
    assert len(want) == 20
    code, out, err = _gen(capsys, d, "--eos", "none")
    assert out == PROMPT + tok.decode(want) + "\n"
    assert err.strip().splitlines()[-1] == (
        "prompt 1/1: stopped: Hugging Face's default max_length 20 (20 new tokens) reached"
    )
    torch.manual_seed(3)
    want = _hf_default(d, eos_token_id=None, do_sample=True)  # temperature 1.0, top-k 50: HF's draws
    code, out, err = _gen(capsys, d, "--eos", "none", "--sample", "--seed", "3")
    assert out == PROMPT + tok.decode(want) + "\n"
    assert err.strip().splitlines()[0] == (
        f"{d / 'generation_config.json'}: sets no decoding option, so Hugging Face's GenerationConfig defaults "
        "apply: max_length=20 (20 new tokens), temperature=1.0, top_k=50 (a flag overrides each)"
    )
    long = "the quick brown fox jumps over the lazy dog. " * 5  # HF's default length stops at the 64 positions
    model = transformers.GPT2LMHeadModel.from_pretrained(d).eval()
    ids = torch.tensor([tok(long)["input_ids"]])
    assert 44 < ids.shape[1] < 64
    want = model.generate(ids, attention_mask=torch.ones_like(ids), eos_token_id=None)[0, ids.shape[1] :].tolist()
    assert len(want) == 64 - ids.shape[1]
    code = main(["generate", "--checkpoint", str(d), "--prompt", long, "--eos", "none"])
    out, err = capsys.readouterr()
    assert code == 0 and out == long + tok.decode(want) + "\n"
    assert err.strip().splitlines()[-1] == (
        "prompt 1/1: stopped: Hugging Face's default max_length 20 (20 new tokens, cut to the 64 positions) reached"
    )
    longer = long * 2
    with pytest.raises(ValueError, match="Input length"):  # HF refuses a prompt that fills the positions
        ids = torch.tensor([tok(longer)["input_ids"]])
        model.generate(ids, attention_mask=torch.ones_like(ids))
    code = main(["generate", "--checkpoint", str(d), "--prompt", longer])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and "\n" not in err.strip()
    assert "fills this model's 64 positions" in err and "pass --max-new-tokens N" in err
    assert main(["generate", "--checkpoint", str(d), "--prompt", longer, "--max-new-tokens", "3"]) == 0  # slides


def test_a_files_do_sample_without_a_temperature_samples_at_hfs_1_0(hf_dir, tmp_path, capsys):
    """do_sample true and no temperature in generation_config.json: HF samples at its default temperature 1.0 (the
    command line once put its own 0.8 under the file); the same seed gives HF's draws."""
    d = _with_generation_config(hf_dir, tmp_path, {"do_sample": True, "max_new_tokens": 8, "eos_token_id": None})
    tok = transformers.AutoTokenizer.from_pretrained(d)
    torch.manual_seed(3)
    want = _hf_default(d)
    torch.manual_seed(3)
    assert _hf_default(d, temperature=0.8) != want  # this seed tells the two temperatures apart
    code, out, err = _gen(capsys, d, "--seed", "3")
    assert code == 0, err
    assert out == PROMPT + tok.decode(want) + "\n"
    assert err.strip().splitlines()[0] == (
        f"{d / 'generation_config.json'}: do_sample=true, max_new_tokens=8; Hugging Face's GenerationConfig "
        "defaults for what it leaves unset: temperature=1.0, top_k=50 (a flag overrides each)"
    )
    assert err.strip().splitlines()[-1] == "prompt 1/1: stopped: max_new_tokens 8 from generation_config.json reached"


def test_the_files_beam_search_and_max_length_run_as_in_hf(hf_dir, tmp_path, capsys):
    tok = transformers.AutoTokenizer.from_pretrained(hf_dir)
    width = len(tok(PROMPT)["input_ids"])
    cases = [
        {"num_beams": 3, "max_new_tokens": 6, "length_penalty": 0.5, "eos_token_id": None},
        {"do_sample": False, "max_length": width + 5, "eos_token_id": None},
        {"do_sample": True, "top_k": 1, "max_new_tokens": 6, "eos_token_id": None},  # top-k 1: the arg-max
        {"repetition_penalty": 1.3, "eos_token_id": None},  # no mode, no length: HF's greedy and max_length 20
    ]
    reasons = [  # the stop reason names where the budget came from (it once read "--max-new-tokens 6 reached")
        "max_new_tokens 6 from generation_config.json reached",
        f"max_length {width + 5} from generation_config.json reached",
        "max_new_tokens 6 from generation_config.json reached",
        "Hugging Face's default max_length 20 (20 new tokens) reached",
    ]
    for i, (values, reason) in enumerate(zip(cases, reasons)):
        d = _with_generation_config(hf_dir, tmp_path / str(i), values)
        want = _hf_default(d)
        assert len(want) in (5, 6, 20)
        code, out, err = _gen(capsys, d, "--eos", "none")
        assert code == 0, err
        assert out == PROMPT + tok.decode(want) + "\n", values
        assert err.strip().splitlines()[-1] == f"prompt 1/1: stopped: {reason}", values
    assert err.strip().splitlines()[0] == (
        f"{d / 'generation_config.json'}: repetition_penalty=1.3; Hugging Face's GenerationConfig defaults for what "
        "it leaves unset: do_sample=false, max_length=20 (20 new tokens) (a flag overrides each)"
    )


def test_flags_against_the_files_defaults_are_refused_naming_both(hf_dir, tmp_path, capsys):
    d = _with_generation_config(hf_dir, tmp_path, {"do_sample": False, "typical_p": 1.0})
    code, out, err = _gen(capsys, d, "--temperature", "0.7")
    assert code == 2 and out == ""
    assert err.strip() == (
        f"anatomy generate: error: --temperature only shapes sampling, and {d / 'generation_config.json'}'s "
        "do_sample false asks for greedy decoding: add --sample or drop --temperature"
    )
    assert _gen(capsys, d, "--sample", "--temperature", "0.7", "--max-new-tokens", "3")[0] == 0
    (d / "generation_config.json").write_text(json.dumps({"typical_p": 0.9}))
    code, _, err = _gen(capsys, d)
    assert code == 2 and "field 'typical_p' is 0.9, a Hugging Face option anatomy's generate does not implement" in err
    (d / "generation_config.json").write_text(json.dumps({"num_beams": 2, "do_sample": True}))
    code, _, err = _gen(capsys, d)
    assert code == 2 and "sets do_sample true with num_beams 2 (beam sampling)" in err
    assert _gen(capsys, d, "--greedy", "--max-new-tokens", "2")[0] == 0
    (d / "generation_config.json").write_text(json.dumps({"max_new_tokens": "7"}))
    code, _, err = _gen(capsys, d)
    assert code != 0 and err.strip().endswith(
        f"{d / 'generation_config.json'}: field 'max_new_tokens' must be a positive integer, got '7'"
    )
