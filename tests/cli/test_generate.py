"""``anatomy generate``: contradictory options exit 2 naming both; a prompts file runs as one batch with the same
text as each prompt alone; --stream prints what the batch path prints; beams, stop strings, penalties, JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from anatomy import ModelConfig, build_model, save_pretrained
from anatomy.cli.main import main
from anatomy.data.tokenizers import CharTokenizer

TEXT = "the cat sat on the mat. a dog ran!\n"


def _checkpoint(path: Path, max_seq_len: int) -> Path:
    tok = CharTokenizer.train([TEXT])
    torch.manual_seed(0)
    model = build_model(
        ModelConfig.from_preset(
            "gpt2", vocab_size=tok.vocab_size, d_model=32, n_heads=4, n_layers=2, d_ff=64, max_seq_len=max_seq_len
        )
    )
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.5 * torch.randn_like(p))
    save_pretrained(model, path)
    tok.save(path)
    return path


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory) -> Path:
    return _checkpoint(tmp_path_factory.mktemp("gen") / "lm", 64)


def _run(capsys, *argv) -> tuple[int, str, str]:
    code = main(["generate", *map(str, argv)])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize(
    "extra,named",
    [
        (["--greedy", "--top-p", "0.9"], ["--greedy", "--top-p 0.9"]),
        (["--greedy", "--temperature", "0.5"], ["--greedy", "--temperature 0.5"]),
        (["--greedy", "--min-p", "0.1"], ["--greedy", "--min-p 0.1"]),
        (["--greedy", "--num-beams", "4"], ["--greedy", "--num-beams 4"]),
        (["--num-beams", "4", "--top-k", "5"], ["--num-beams 4", "--top-k 5"]),
        (["--length-penalty", "2"], ["--length-penalty", "--num-beams"]),
        (["--early-stopping", "true"], ["--early-stopping", "--num-beams"]),
        (["--greedy", "--num-return-sequences", "2"], ["--greedy", "--num-return-sequences 2"]),
        (["--num-beams", "2", "--num-return-sequences", "3"], ["--num-return-sequences 3", "--num-beams 2"]),
        (["--stream", "--num-beams", "2"], ["--stream", "--num-beams 2"]),
        (["--stream", "--num-return-sequences", "2"], ["--stream", "--num-return-sequences 2"]),
        (["--stream", "--format", "json"], ["--stream", "--format json"]),
        (["--prompts-file", "x.txt"], ["--prompt", "--prompts-file", "not both"]),
        (["--top-p", "1.5"], ["--top-p must be in (0, 1], got 1.5"]),
        (["--min-p", "-0.1"], ["--min-p must be in [0, 1]"]),
        (["--temperature", "0"], ["--temperature must be > 0"]),
        (["--repetition-penalty", "0"], ["--repetition-penalty must be > 0"]),
    ],
)
def test_contradictions_exit_2_naming_both(ckpt, capsys, extra, named):
    code, out, err = _run(capsys, "--checkpoint", ckpt, "--prompt", "the", *extra)
    assert code == 2 and out == ""
    line = err.strip()
    assert "\n" not in line and line.startswith("anatomy generate: error:")
    for part in named:
        assert part in line, (part, line)


def test_prompts_file_runs_a_batch_equal_to_each_prompt_alone(ckpt, tmp_path, capsys):
    prompts = tmp_path / "prompts.txt"
    prompts.write_text('the cat\n\na dog\n"sat\\non"\n', encoding="utf-8")  # a blank line; a JSON line with \n
    code, batch, _ = _run(
        capsys,
        "--checkpoint",
        ckpt,
        "--prompts-file",
        prompts,
        "--greedy",
        "--max-new-tokens",
        "12",
        "--format",
        "json",
    )
    assert code == 0
    rows = json.loads(batch)
    assert [r["prompt"] for r in rows] == ["the cat", "a dog", "sat\non"]
    for row in rows:
        code, alone, _ = _run(
            capsys, "--checkpoint", ckpt, "--prompt", row["prompt"], "--greedy", "--max-new-tokens", "12"
        )
        assert code == 0 and row["outputs"] == [alone[:-1]]  # left padding changes nothing
        assert len(alone[:-1]) == len(row["prompt"]) + 12
    code, text, _ = _run(capsys, "--checkpoint", ckpt, "--prompts-file", prompts, "--greedy", "--max-new-tokens", "12")
    assert text.count("--- prompt ") == 3 and rows[1]["outputs"][0] in text


def test_stream_prints_what_the_batch_path_prints(ckpt, capsys):
    args = ["--checkpoint", ckpt, "--prompt", "the", "--max-new-tokens", "30", "--seed", "3"]
    code, plain, _ = _run(capsys, *args)
    assert code == 0
    code, streamed, _ = _run(capsys, *args, "--stream")
    assert code == 0 and streamed == plain
    long = ["--checkpoint", ckpt, "--prompt", "the", "--max-new-tokens", "150", "--greedy"]  # past max_seq_len 64
    assert _run(capsys, *long)[1] == _run(capsys, *long, "--stream")[1]


def test_beams_stop_strings_and_penalties(ckpt, capsys):
    code, out, _ = _run(
        capsys,
        "--checkpoint",
        ckpt,
        "--prompt",
        "the",
        "--num-beams",
        "4",
        "--num-return-sequences",
        "2",
        "--max-new-tokens",
        "10",
        "--length-penalty",
        "0",
    )
    assert code == 0 and out.count("--- prompt 1/1, sequence ") == 2
    texts = [block.strip() for block in out.split("---")[2::2]]
    assert len(texts) == 2 and texts[0] != texts[1] and all(t.startswith("the") for t in texts)
    code, free, _ = _run(capsys, "--checkpoint", ckpt, "--prompt", "the", "--greedy", "--max-new-tokens", "20")
    new = free[3:-1]
    stop = new[4:6]  # two characters the model does produce
    code, stopped, _ = _run(
        capsys, "--checkpoint", ckpt, "--prompt", "the", "--greedy", "--max-new-tokens", "20", "--stop", stop
    )
    assert code == 0 and stopped[:-1] == "the" + new[: new.index(stop) + len(stop)]
    code, penalised, _ = _run(
        capsys,
        "--checkpoint",
        ckpt,
        "--prompt",
        "the",
        "--greedy",
        "--max-new-tokens",
        "20",
        "--repetition-penalty",
        "3",
    )
    assert code == 0 and penalised != free and len(penalised) == len(free)  # (HF parity: tests/generation)
    code, out, _ = _run(capsys, "--checkpoint", ckpt, "--prompt", "the", "--min-p", "0.5", "--max-new-tokens", "5")
    assert code == 0 and len(out[:-1]) == 8


def test_bad_prompts_file_and_beams_past_the_window(ckpt, tmp_path, capsys):
    missing = tmp_path / "none.txt"
    code, _, err = _run(capsys, "--checkpoint", ckpt, "--prompts-file", missing)
    assert code == 2 and "--prompts-file" in err and "does not exist" in err
    blank = tmp_path / "blank.txt"
    blank.write_text("\n  \n", encoding="utf-8")
    assert _run(capsys, "--checkpoint", ckpt, "--prompts-file", blank)[0] == 2
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"\xff\xfe")
    code, _, err = _run(capsys, "--checkpoint", ckpt, "--prompts-file", bad)
    assert code == 2 and "is not UTF-8 text" in err
    code, _, err = _run(capsys, "--checkpoint", ckpt)
    assert code == 2 and "give --prompt TEXT or --prompts-file FILE" in err
    code, _, err = _run(capsys, "--checkpoint", ckpt, "--prompt", "the", "--num-beams", "2", "--max-new-tokens", "100")
    assert code == 2 and "--num-beams needs the prompt and --max-new-tokens inside one window" in err


def _seq2seq_model() -> tuple[CharTokenizer, torch.nn.Module]:
    """A small T5-style model with weights moved off their initialisation (so beams differ), and its tokenizer."""
    tok = CharTokenizer.train([TEXT])
    torch.manual_seed(0)
    model = build_model(
        ModelConfig.from_preset(
            "t5", vocab_size=tok.vocab_size, d_model=32, n_heads=4, n_layers=2, d_ff=64, max_seq_len=32
        )
    )
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.5 * torch.randn_like(p))
    return tok, model


def test_seq2seq_prompts_file_with_beams(tmp_path, capsys):
    tok, model = _seq2seq_model()
    save_pretrained(model, tmp_path / "s2s")
    tok.save(tmp_path / "s2s")
    prompts = tmp_path / "p.txt"
    prompts.write_text("the cat\na dog ran\n", encoding="utf-8")
    base = ["--checkpoint", tmp_path / "s2s", "--max-new-tokens", "8", "--num-beams", "3", "--format", "json"]
    code, out, _ = _run(capsys, *base, "--prompts-file", prompts, "--num-return-sequences", "2")
    assert code == 0
    rows = json.loads(out)
    assert [len(r["outputs"]) for r in rows] == [2, 2] and all(len(t) == 8 for r in rows for t in r["outputs"])
    for row in rows:  # a batch of right-padded sources gives each source's own beams
        code, alone, _ = _run(capsys, *base, "--prompt", row["prompt"], "--num-return-sequences", "2")
        assert json.loads(alone)[0]["outputs"] == row["outputs"]


def test_compile_flag_prints_the_eager_text(ckpt, capsys, monkeypatch):
    from anatomy.generation import compiled

    monkeypatch.setattr(compiled, "BACKEND", "aot_eager")  # the graph capture, without the inductor's C++ build
    args = ["--checkpoint", ckpt, "--prompt", "the", "--max-new-tokens", "12", "--greedy"]
    before = compiled.STATS.compilations
    code, on, _ = _run(capsys, *args, "--compile", "on")
    assert code == 0 and compiled.STATS.compilations == before + 1
    code, off, _ = _run(capsys, *args, "--compile", "off")
    assert code == 0 and on == off
    with pytest.raises(SystemExit):
        main(["generate", "--checkpoint", str(ckpt), "--prompt", "the", "--compile", "yes"])
    assert "--compile: invalid choice: 'yes'" in capsys.readouterr().err


def test_seq2seq_takes_its_generation_config_json_as_generate_does(tmp_path, capsys):
    """A seq2seq checkpoint whose generation_config.json asks for 3 beams and max_length 6 (which counts the
    decoder start, as in HF): the command line without flags prints what load_pretrained(...).generate gives."""
    from anatomy import load_pretrained
    from anatomy.cli.generate import Visible

    tok, model = _seq2seq_model()
    model.generation_config.update(num_beams=3, max_length=6, length_penalty=0.5)
    save_pretrained(model, tmp_path / "s2s")
    tok.save(tmp_path / "s2s")
    written = json.loads((tmp_path / "s2s" / "generation_config.json").read_text())
    assert written == {"length_penalty": 0.5, "max_length": 6, "num_beams": 3}
    src = tok.encode("the cat") + ([tok.eos_id] if tok.eos_id is not None else [])
    out = load_pretrained(tmp_path / "s2s").generate(torch.tensor([src]), eos_token_id=None)
    want = Visible(tok).decode(out[0, 1:].tolist())
    assert out.shape[1] == 6
    code, printed, err = _run(capsys, "--checkpoint", tmp_path / "s2s", "--prompt", "the cat", "--eos", "none")
    assert code == 0 and printed == want + "\n"
    assert "generation_config.json: num_beams=3, max_length=6, length_penalty=0.5 (a flag overrides each)" in err
    code, printed, _ = _run(
        capsys, "--checkpoint", tmp_path / "s2s", "--prompt", "the cat", "--eos", "none", "--greedy"
    )
    greedy = load_pretrained(tmp_path / "s2s").generate(
        torch.tensor([src]), eos_token_id=None, do_sample=False, num_beams=1
    )
    assert code == 0 and printed == Visible(tok).decode(greedy[0, 1:].tolist()) + "\n"


def test_without_a_generation_config_json_the_command_lines_defaults_stay(ckpt, capsys):
    """No generation_config.json (our own checkpoints): sampling at temperature 0.8, 200 new tokens, no line about
    defaults; HF's GenerationConfig defaults apply only under such a file (tests/cli/test_generate_hf.py)."""
    assert not (ckpt / "generation_config.json").exists()
    code, out, err = _run(capsys, "--checkpoint", ckpt, "--prompt", "the", "--eos", "none", "--seed", "1")
    assert code == 0 and len(out) == len("the") + 200 + 1
    assert err.strip() == "prompt 1/1: stopped: --max-new-tokens 200 reached"
    same = ["--eos", "none", "--seed", "1", "--max-new-tokens", "200"]
    assert _run(capsys, "--checkpoint", ckpt, "--prompt", "the", *same, "--temperature", "0.8")[1] == out
    assert _run(capsys, "--checkpoint", ckpt, "--prompt", "the", *same, "--temperature", "1.0")[1] != out
