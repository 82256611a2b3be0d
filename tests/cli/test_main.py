"""The command table's parsing: a command's key=value words may stand before or after its options, in any number
of stretches; anything else argparse does not know is still refused."""

from __future__ import annotations

import pytest

from anatomy.cli.main import build_parser, parse


@pytest.mark.parametrize("argv, words", [
    (["train", "--preset", "char-tang", "steps=5", "--out", "runs/a", "lr=1e-3", "seed=2"],
     ["steps=5", "lr=1e-3", "seed=2"]),
    (["train", "--out", "runs/a", "steps=5"], ["steps=5"]),
    (["train", "steps=5", "lr=1e-3", "--out", "runs/a"], ["steps=5", "lr=1e-3"]),
    (["train", "--out", "runs/a"], []),
])
def test_train_words_before_and_after_options(argv, words):
    args = parse(build_parser(), argv)
    assert args.words == words and args.out == "runs/a"


def test_viz_overrides_after_options():
    argv = ["viz", "attention", "--preset", "gpt2", "n_layers=2", "--text", "abc", "--out", "x.png", "d_model=64"]
    args = parse(build_parser(), argv)
    assert args.overrides == ["n_layers=2", "d_model=64"] and args.out == "x.png"


@pytest.mark.parametrize("argv", [
    ["train", "--out", "runs/a", "steps=5", "--bogus", "1"],
    ["trace", "my.py:Attn", "stray"],  # trace takes one FILE.py:CLASS, no other free words
])
def test_unknown_arguments_are_still_refused(argv, capsys):
    with pytest.raises(SystemExit) as info:
        parse(build_parser(), argv)
    assert info.value.code == 2 and "unrecognized arguments" in capsys.readouterr().err
