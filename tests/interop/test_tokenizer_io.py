"""Tokenizers travel with models: a tiny HF GPT-2 saved with its own byte-level BPE tokenizer (built offline here)
is converted, and every command that takes --checkpoint encodes and decodes with that tokenizer."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from anatomy.cli.main import main
from anatomy.data.tokenizers import CharTokenizer, load_tokenizer
from anatomy.data.tokenizers_hf import HFTokenizer
from anatomy.interop import tokenizer_io

transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()
transformers.utils.logging.disable_progress_bar()

EOT = "<|endoftext|>"
TEXTS = ["hello world, the quick brown fox", "  spaces\tand\nnewlines  ", "naïve café — 中文 😀", "<|endoftext|>x"]


def byte_bpe(vocab_size: int = 300):
    """A tiny GPT-2-style byte-level BPE (``<|endoftext|>`` at id 0), trained offline on a fixed sentence."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOT],
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(["hello world, the quick brown fox jumps over the lazy dog. " * 20], trainer=trainer)
    return tok


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
    """HF directory: a tiny random GPT2LMHeadModel + its tokenizer (tokenizer.json, tokenizer_config.json)."""
    d = tmp_path_factory.mktemp("hf") / "gpt2"
    tok = byte_bpe()
    fast = transformers.GPT2TokenizerFast(tokenizer_object=tok, eos_token=EOT, bos_token=EOT, unk_token=EOT)
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        n_layer=2, n_embd=32, n_head=4, vocab_size=tok.get_vocab_size(), n_positions=64, bos_token_id=0, eos_token_id=0
    )
    model = transformers.GPT2LMHeadModel(config).eval()
    with torch.no_grad():  # HF's init gives near-uniform logits: spread them so greedy decoding says something
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.2)
    model.save_pretrained(d)
    fast.save_pretrained(d)
    return d


def _greedy_hf(d, prompt: str, n: int) -> str:
    """prompt + n greedy tokens, computed with transformers alone (its model, its tokenizer)."""
    tok = transformers.AutoTokenizer.from_pretrained(d)
    model = transformers.GPT2LMHeadModel.from_pretrained(d).eval()
    ids = tok(prompt)["input_ids"]
    with torch.no_grad():
        for _ in range(n):
            ids.append(int(model(torch.tensor([ids])).logits[0, -1].argmax()))
    return prompt + tok.decode(ids[len(tok(prompt)["input_ids"]) :], skip_special_tokens=True)


def test_reads_what_transformers_reads(hf_dir):
    ours = tokenizer_io.read_hf_tokenizer(hf_dir)
    theirs = transformers.AutoTokenizer.from_pretrained(hf_dir)
    assert isinstance(ours, HFTokenizer) and ours.vocab_size == len(theirs) == 298
    assert (ours.eos_id, ours.bos_id, ours.pad_id) == (0, 0, 0)  # no pad token: pad is eos
    for text in TEXTS:
        ids = ours.encode(text)
        assert ids == theirs(text)["input_ids"]
        assert ours.decode(ids) == theirs.decode(ids, skip_special_tokens=True)
        assert ours.decode(ids, skip_special=False) == theirs.decode(ids)


def test_gpt2_vocab_and_merges_alone(hf_dir, tmp_path):
    """GPT-2's original files (no tokenizer.json) give the same ids as transformers' GPT2Tokenizer on them."""
    d = tmp_path / "old"
    d.mkdir()
    byte_bpe().model.save(str(d))  # vocab.json + merges.txt
    ours = tokenizer_io.read_hf_tokenizer(d)
    theirs = transformers.GPT2Tokenizer(str(d / "vocab.json"), str(d / "merges.txt"))
    assert ours.eos_id == 0 and ours.specials["eos_token"] == EOT
    for text in TEXTS[:3]:
        assert ours.encode(text) == theirs(text)["input_ids"]
        assert ours.decode(ours.encode(text)) == text


def test_convert_then_generate_decodes_with_the_models_tokenizer(hf_dir, tmp_path, capsys):
    out = tmp_path / "ours"
    assert main(["convert", "--from-hf", str(hf_dir), "--out", str(out)]) == 0
    said = capsys.readouterr().out
    assert (
        f"tokenizer: GPT2Tokenizer (298 tokens; bos {EOT!r}, eos {EOT!r}, unk {EOT!r}) -> {out / 'tokenizer.json'}"
        in said
    )
    assert (out / "tokenizer.json").is_file() and (out / "tokenizer_config.json").is_file()
    assert main(["generate", "--checkpoint", str(out), "--prompt", "hello", "--greedy", "--max-new-tokens", "12"]) == 0
    printed = capsys.readouterr().out.rstrip("\n")
    expected = _greedy_hf(hf_dir, "hello", 12)
    assert printed == expected and len(expected) > len("hello")


def test_checkpoint_commands_use_the_tokenizer(hf_dir, tmp_path, capsys):
    out = tmp_path / "ours"
    assert main(["convert", "--from-hf", str(hf_dir), "--out", str(out)]) == 0
    capsys.readouterr()
    n = len(transformers.AutoTokenizer.from_pretrained(hf_dir)("hello world")["input_ids"])
    assert main(["trace", "--checkpoint", str(out), "--text", "hello world", "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert f"text of {n} tokens" in rows["title"] and f"T={n}" in rows["rows"][0]["dims"]
    assert (
        main(["viz", "attention", "--checkpoint", str(out), "--text", "hello world", "--out", str(tmp_path / "a.html")])
        == 0
    )
    page = (tmp_path / "a.html").read_text(encoding="utf-8")
    assert (
        "the checkpoint&#x27;s own tokenizer (HFTokenizer" in page
        or "the checkpoint's own tokenizer (HFTokenizer" in page
    )
    assert "ord(char)" not in page


def test_to_hf_writes_the_tokenizer_back(hf_dir, tmp_path, capsys):
    out, back = tmp_path / "ours", tmp_path / "back"
    assert main(["convert", "--from-hf", str(hf_dir), "--out", str(out)]) == 0
    assert main(["convert", "--to-hf", str(out), "--out", str(back)]) == 0
    assert "tokenizer: GPT2Tokenizer (298 tokens" in capsys.readouterr().out
    a, b = (transformers.AutoTokenizer.from_pretrained(d) for d in (hf_dir, back))
    assert type(a) is type(b) and a.eos_token == b.eos_token == EOT
    for text in TEXTS:
        assert a(text)["input_ids"] == b(text)["input_ids"]


def test_our_char_tokenizer_written_for_hf(tmp_path):
    """A character tokenizer becomes an HF WordLevel one with the same ids, newlines and astral characters too."""
    text = "ab\n 中😀a\n\nb"
    ours = CharTokenizer.train([text])
    tokenizer_io.write_hf_tokenizer(ours, tmp_path)
    theirs = transformers.AutoTokenizer.from_pretrained(tmp_path)
    assert theirs(text)["input_ids"] == ours.encode(text)
    assert theirs.decode(ours.encode(text) + [1], skip_special_tokens=True) == text
    assert (theirs.pad_token_id, theirs.eos_token_id) == (0, 1)
    again = load_tokenizer(tmp_path)  # and ours reads it back as an HF tokenizer with the same ids
    assert (
        isinstance(again, HFTokenizer)
        and again.encode(text) == ours.encode(text)
        and again.decode(again.encode(text)) == text
    )


def test_a_tokenizer_bigger_than_the_vocabulary_is_refused_before_writing(hf_dir, tmp_path, capsys):
    d = tmp_path / "big"
    shutil.copytree(hf_dir, d)
    tok = byte_bpe()
    tok.add_tokens([f"<extra_{i}>" for i in range(3)])  # 301 tokens for a 298-row embedding
    transformers.GPT2TokenizerFast(tokenizer_object=tok, eos_token=EOT).save_pretrained(d)
    big = tokenizer_io.read_hf_tokenizer(d).vocab_size
    assert big == 301
    assert main(["convert", "--from-hf", str(d), "--out", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err.strip()
    assert err == (
        f"anatomy convert: error: {d}: the tokenizer has {big} tokens but the model's vocab_size is 298: "
        "ids >= 298 would have no embedding"
    )
    assert not (tmp_path / "out").exists()


def test_without_a_tokenizer_convert_says_so_and_generate_names_the_file(hf_dir, tmp_path, capsys):
    d = tmp_path / "bare"
    d.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(hf_dir / name, d / name)
    assert main(["convert", "--from-hf", str(d), "--out", str(tmp_path / "o")]) == 0
    assert f"tokenizer: none in {d}" in capsys.readouterr().out
    assert main(["generate", "--checkpoint", str(tmp_path / "o"), "--prompt", "hi"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no tokenizer.json in" in err[0]


def test_a_sentencepiece_model_alone_is_refused_by_name(tmp_path):
    (tmp_path / "tokenizer.model").write_bytes(b"\x00")
    with pytest.raises(ValueError, match="only a sentencepiece tokenizer.model"):
        HFTokenizer.from_directory(tmp_path)


def test_evaluate_file_on_a_converted_model_is_transformers_own_loss(hf_dir, tmp_path, capsys):
    """One window (the file is shorter than max_seq_len): the loss is HF's ``model(ids, labels=ids).loss``."""
    out, text = tmp_path / "ours", "hello world, the quick brown fox jumps over the lazy dog.\n"
    (tmp_path / "t.txt").write_text(text, encoding="utf-8")
    assert main(["convert", "--from-hf", str(hf_dir), "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["evaluate", "--checkpoint", str(out), "--file", str(tmp_path / "t.txt"), "--format", "json"]) == 0
    result = json.loads(capsys.readouterr().out)
    ids = transformers.AutoTokenizer.from_pretrained(hf_dir)(text)["input_ids"]
    with torch.no_grad():
        hf_loss = float(
            transformers.GPT2LMHeadModel.from_pretrained(hf_dir)(torch.tensor([ids]), labels=torch.tensor([ids])).loss
        )
    assert result["tokens"] == len(ids) < 64 and result["predicted"] == len(ids) - 1
    assert result["loss"] == pytest.approx(hf_loss, abs=1e-5)
    assert result["perplexity"] == pytest.approx(torch.tensor(hf_loss).exp().item(), rel=1e-5)


def test_gpt2s_original_files_convert_and_generate(hf_dir, tmp_path, capsys):
    """An HF directory with vocab.json + merges.txt only: convert keeps that tokenizer, generate decodes with it."""
    d = tmp_path / "old"
    d.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(hf_dir / name, d / name)
    byte_bpe().model.save(str(d))
    assert main(["convert", "--from-hf", str(d), "--out", str(tmp_path / "o")]) == 0
    assert "tokenizer: GPT2Tokenizer (298 tokens" in capsys.readouterr().out
    assert (
        main(
            [
                "generate",
                "--checkpoint",
                str(tmp_path / "o"),
                "--prompt",
                "the quick",
                "--greedy",
                "--max-new-tokens",
                "6",
            ]
        )
        == 0
    )
    assert capsys.readouterr().out.rstrip("\n") == _greedy_hf(hf_dir, "the quick", 6)


def test_a_tokenizer_that_does_not_fit_the_vocabulary_loads_with_a_warning_naming_both_sizes(tmp_path):
    import warnings

    from tokenizers import Tokenizer, models, pre_tokenizers

    import anatomy
    from anatomy.interop.safetensors_io import save_pretrained

    word_level = Tokenizer(models.WordLevel({f"w{i}": i for i in range(10)}, unk_token="w0"))
    word_level.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    hf_tok = HFTokenizer(word_level, specials={"unk_token": "w0"})  # a transformers tokenizer.json of 10 symbols
    tok = CharTokenizer("abcdefgh")  # 8 characters + <pad>, <eos>: 10 symbols
    cases = [
        (hf_tok, 6000, "10 tokens under a vocabulary of 6000"),
        (tok, 6000, "10 tokens under a vocabulary of 6000"),
        (tok, 8, "10 tokens but the model's vocab_size is 8"),
    ]
    for i, (saved, vocab, said) in enumerate(cases):
        d = tmp_path / str(i)
        model = anatomy.build_model(
            anatomy.ModelConfig.from_preset("gpt2", n_layers=1, d_model=8, n_heads=2, vocab_size=vocab, max_seq_len=16)
        )
        save_pretrained(model, d)
        saved.save(d)
        with pytest.warns(UserWarning, match=said):
            loaded = anatomy.load_pretrained(d)
        assert loaded.tokenizer.vocab_size == 10  # it still travels with the model, as read
    d = tmp_path / "fits"
    save_pretrained(
        anatomy.build_model(
            anatomy.ModelConfig.from_preset("gpt2", n_layers=1, d_model=8, n_heads=2, vocab_size=10, max_seq_len=16)
        ),
        d,
    )
    tok.save(d)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert anatomy.load_pretrained(d).to_str_tokens("bad", prepend_bos=False) == ["b", "a", "d"]
