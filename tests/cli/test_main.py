"""The command table's parsing: a command's key=value words may stand before or after its options, in any number
of stretches; anything else argparse does not know is still refused."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from anatomy.cli import main as cli
from anatomy.cli.main import build_parser, parse


@pytest.mark.parametrize(
    "argv, words",
    [
        (
            ["train", "--preset", "char-tang", "steps=5", "--out", "runs/a", "lr=1e-3", "seed=2"],
            ["steps=5", "lr=1e-3", "seed=2"],
        ),
        (["train", "--out", "runs/a", "steps=5"], ["steps=5"]),
        (["train", "steps=5", "lr=1e-3", "--out", "runs/a"], ["steps=5", "lr=1e-3"]),
        (["train", "--out", "runs/a"], []),
    ],
)
def test_train_words_before_and_after_options(argv, words):
    args = parse(build_parser(), argv)
    assert args.words == words and args.out == "runs/a"


def test_viz_overrides_after_options():
    argv = ["viz", "attention", "--preset", "gpt2", "n_layers=2", "--text", "abc", "--out", "x.png", "d_model=64"]
    args = parse(build_parser(), argv)
    assert args.overrides == ["n_layers=2", "d_model=64"] and args.out == "x.png"


@pytest.mark.parametrize(
    "argv",
    [
        ["train", "--out", "runs/a", "steps=5", "--bogus", "1"],
        ["trace", "my.py:Attn", "stray"],  # trace takes one FILE.py:CLASS, no other free words
    ],
)
def test_unknown_arguments_are_still_refused(argv, capsys):
    with pytest.raises(SystemExit) as info:
        parse(build_parser(), argv)
    assert info.value.code == 2 and "unrecognized arguments" in capsys.readouterr().err


# ------------------------------------------------- one place for the operating system, memory and Ctrl-C (issue 16)
def _raising(error: BaseException):
    def run(args):
        raise error

    return run


@pytest.mark.parametrize(
    "error, code, expected",
    [
        (
            OSError(errno.ENOSPC, "No space left on device", "/data/run/metrics.jsonl"),
            1,
            "no space left on the device holding '/data/run/metrics.jsonl': free some space",
        ),
        (
            OSError(errno.EROFS, "Read-only file system", "/ro/run"),
            1,
            "'/ro/run' is on a read-only file system: choose a writable folder",
        ),
        (PermissionError(errno.EACCES, "Permission denied", "/root/x"), 1, "permission denied for '/root/x'"),
        (
            NotADirectoryError(errno.ENOTDIR, "Not a directory", "/a/file.txt/run"),
            1,
            "'/a/file.txt/run': a part of this path is a file, not a folder",
        ),
        (FileExistsError(errno.EEXIST, "File exists", "/a/b"), 1, "'/a/b' already exists: choose another path"),
        (OSError(errno.EIO, "Input/output error", "/a/b"), 1, "'/a/b': Input/output error"),
        (MemoryError(), 1, "out of memory (MemoryError)"),
        (KeyboardInterrupt(), 130, "interrupted"),
    ],
)
def test_os_errors_memory_and_ctrl_c_are_one_line_with_a_documented_code(monkeypatch, capsys, error, code, expected):
    add, _, help_text = cli.COMMANDS["trace"]
    monkeypatch.setitem(cli.COMMANDS, "trace", (add, _raising(error), help_text))
    assert cli.main(["trace"]) == code
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("anatomy trace: ") and expected in lines[0], lines


def test_train_errors_say_how_to_continue(monkeypatch, capsys):
    add, _, help_text = cli.COMMANDS["train"]
    monkeypatch.setitem(cli.COMMANDS, "train", (add, _raising(OSError(errno.ENOSPC, "full", "/d/r/x")), help_text))
    assert cli.main(["train", "--resume", "/d/r"]) == 1
    assert "continue with `anatomy train --resume /d/r`" in capsys.readouterr().err
    monkeypatch.setitem(cli.COMMANDS, "train", (add, _raising(KeyboardInterrupt()), help_text))
    assert cli.main(["train", "--out", "/d/r"]) == 130
    assert "interrupted; the checkpoints saved so far are complete" in capsys.readouterr().err


def test_exit_codes_are_documented():
    doc = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text(encoding="utf-8")
    for code in ("`0`", "`1`", "`2`", "`130`"):
        assert code in doc


def test_version_is_the_package_version(capsys):
    import anatomy
    from anatomy.cli.main import main

    with pytest.raises(SystemExit) as stop:
        main(["--version"])
    assert stop.value.code == 0
    assert capsys.readouterr().out.strip() == f"anatomy {anatomy.__version__}"


# ------------------------------------------------- hostile input to every command: one line naming the argument
HUGE = "10000000000000000000000"


@pytest.mark.parametrize(
    "argv, words",
    [
        (["trace", "--preset", "t5", "--tgt-seq", "-1"], ["--tgt-seq must be a positive integer, got -1"]),
        (["trace", "--preset", "gpt2", "--tgt-seq", "3"], ["--tgt-seq is the decoder length of a seq2seq model"]),
        (["trace", "--preset", "gpt2", "--timeout", "nan"], ["--timeout must be a number of seconds >= 0", "nan"]),
        (["trace", "--preset", "gpt2", "--timeout", "-1"], ["--timeout must be a number of seconds >= 0", "-1"]),
        (["trace", "--preset", "gpt2", "--timeout", "inf"], ["--timeout must be a number of seconds >= 0", "inf"]),
        (["viz", "pe", "--kind", "alibi", "--heads", HUGE, "--out", "pe.png"], ["--heads <= 64", HUGE]),
        (["viz", "pe", "--kind", "t5", "--heads", HUGE, "--out", "pe.png"], ["--heads <= 64", HUGE]),
        (["report", "--dry-run", "--seeds", HUGE], ["--seeds must be an integer from 1 to 1000", HUGE]),
        (["claims", "run", "C1", "--dry-run", "--seeds", "0"], ["--seeds must be an integer from 1 to 1000"]),
        (["report", "--dry-run", "--cluster-cpus", "nan"], ["--cluster-cpus must be positive", "nan"]),
        (["claims", "run", "C1", "--dry-run", "--cluster-cpus", "-1"], ["--cluster-cpus must be positive"]),
        (["bench", "--quick", "--threads", HUGE], ["--threads must be an integer from 1 to", HUGE]),
        (["bench", "--quick", "--rounds", HUGE], ["--rounds must be an integer from 1 to 1000", HUGE]),
        (["bench", "--quick", "--repeat", "0"], ["--repeat must be an integer from 1 to 1000"]),
        (["train", "task=lm", "corpus=c.txt", f"seed={HUGE}", "--out", "run"], ["seed must be an integer in", HUGE]),
        (["learn", "check", "attention", "mine.py", "--timeout", "nan"], ["--timeout must be a number of seconds"]),
        (["learn", "check", "attention", "mine.py", "--timeout", "inf"], ["--timeout must be a number of seconds"]),
        (["learn", "check", "attention", "mine.py", "--steps", "-1"], ["--steps must be a positive integer"]),
        (["learn", "check", "attention", "mine.py", "--steps", "3"], ["--steps applies to the exercises that train"]),
    ],
)
def test_hostile_numbers_are_one_line_naming_the_argument(argv, words, tmp_path, monkeypatch, capsys):
    """Found by a sweep of every command with wrong, negative, zero, huge and non-finite numbers: each once ended
    in a traceback (--tgt-seq -1: torch's "negative dimension"; --threads 10**22: "Overflow when unpacking long
    long"), ran on without end (--seeds 10**22 in a dry run, ALiBi with --heads 10**22) or passed without a word
    (--timeout nan, --cluster-cpus nan; learn check blamed the learner's file for --timeout nan)."""
    monkeypatch.chdir(tmp_path)  # a command that wrongly went on writes here, not into the project
    (tmp_path / "mine.py").write_text("import torch.nn as nn\n\n\nclass A(nn.Module):\n    pass\n")
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err and err.startswith(f"anatomy {argv[0]}: error: "), err
    for word in words:
        assert word in err, (word, err)
    assert [p.name for p in tmp_path.iterdir()] == ["mine.py"]  # nothing written


def test_a_checkpoint_in_a_folder_whose_name_is_not_utf8_reads_back(tmp_path, capsys):
    """Our writer puts a checkpoint (and a BPE tokenizer) into a folder named in another encoding; the safetensors
    and tokenizers libraries then refused to open it ("Path ... is not valid UTF-8", read as "it may be truncated
    or corrupted"): the tokenizer and generate now read it back."""
    import os

    import torch

    from anatomy import ModelConfig, build_model, save_pretrained
    from anatomy.data.tokenizers import BPETokenizer, load_tokenizer

    folder = Path(os.fsdecode(os.fsencode(tmp_path) + b"/r\xe9sum\xe9-latin1"))  # 'résumé' in Latin-1
    tok = BPETokenizer.train(["the cat sat on the mat. " * 20], vocab_size=300)
    torch.manual_seed(0)
    model = build_model(
        ModelConfig.from_preset("gpt2", vocab_size=tok.vocab_size, d_model=16, n_heads=2, n_layers=1, max_seq_len=32)
    )
    save_pretrained(model, folder)
    tok.save(folder)
    assert load_tokenizer(folder).encode("the cat") == tok.encode("the cat")
    code = cli.main(["generate", "--checkpoint", str(folder), "--prompt", "the", "--max-new-tokens", "3", "--greedy"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert captured.out.startswith("the") and captured.err.strip().endswith("--max-new-tokens 3 reached")
