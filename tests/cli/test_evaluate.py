"""`anatomy evaluate`: one line (or JSON) with the checkpoint's metrics; bad input exits 2 with one line."""

from __future__ import annotations

import json

import pytest

from anatomy.cli.main import main

TINY = [
    "task=lm",
    "d_model=16",
    "n_heads=2",
    "n_layers=1",
    "d_ff=32",
    "batch_size=4",
    "block_size=16",
    "eval_batches=2",
    "warmup_steps=2",
    "progress=false",
    "plot=false",
    "steps=4",
    "eval_every=4",
    "save_every=4",
]


def test_text_and_json(tmp_path, capsys):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n\n".join(f"verse {i}: the moon is bright tonight." for i in range(80)) + "\n")
    assert main(["train", *TINY, f"corpus={corpus}", "--out", str(tmp_path / "run")]) == 0
    capsys.readouterr()
    assert main(["evaluate", "--checkpoint", str(tmp_path / "run"), "--device", "cpu"]) == 0
    line = capsys.readouterr().out.strip()
    assert "step-000004" in line and "(step 4, lm), test: loss " in line and "perplexity " in line
    assert main(["evaluate", "--checkpoint", str(tmp_path / "run"), "--split", "val", "--format", "json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["split"] == "val" and set(result) >= {"loss", "perplexity", "step", "checkpoint"}


def test_missing_checkpoint_exits_2(tmp_path, capsys):
    assert main(["evaluate", "--checkpoint", str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("anatomy evaluate: error: checkpoint directory")


def test_a_bad_batch_size_names_the_flag(tmp_path, capsys):
    assert main(["evaluate", "--checkpoint", str(tmp_path), "--batch-size", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "anatomy evaluate: error: --batch-size must be a positive integer, got 0"


def test_file_scores_every_token_once_as_a_direct_computation(tmp_path, capsys):
    """--file: windows of --block tokens overlapping by one; the mean loss equals a token-by-token computation
    (each target's log-probability from its own window, read with log_softmax), and windows cover n - 1 targets."""
    import math

    import torch

    from anatomy.training.checkpoint import load_model

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n\n".join(f"verse {i}: the moon is bright tonight." for i in range(80)) + "\n")
    assert main(["train", *TINY, f"corpus={corpus}", "--out", str(tmp_path / "run")]) == 0
    text = "the moon is bright: verse 7 is bright tonight.\n" * 3  # 141 characters: 10 windows of 16
    (tmp_path / "f.txt").write_text(text, encoding="utf-8")
    capsys.readouterr()
    assert (
        main(
            [
                "evaluate",
                "--checkpoint",
                str(tmp_path / "run"),
                "--file",
                str(tmp_path / "f.txt"),
                "--batch-size",
                "3",
                "--format",
                "json",
            ]
        )
        == 0
    )
    result = json.loads(capsys.readouterr().out)
    model, tokenizer, _ = load_model(tmp_path / "run")
    ids = tokenizer.encode(text)
    total = 0.0
    with torch.no_grad():
        for j in range(1, len(ids)):  # target j, from the window that starts at the last multiple of 15 before it
            s = (j - 1) // 15 * 15
            window = torch.tensor([ids[s : min(s + 16, len(ids))]])
            logp = model(input_ids=window).logits[0, j - s - 1].float().log_softmax(-1)
            total -= float(logp[ids[j]])
    assert result["tokens"] == len(ids) == 141 and result["predicted"] == 140 and result["block"] == 16
    assert result["loss"] == pytest.approx(total / 140, abs=1e-5)
    assert result["bits_per_byte"] == pytest.approx(total / math.log(2) / 141, abs=1e-5)
    assert (
        main(["evaluate", "--checkpoint", str(tmp_path / "run"), "--file", str(tmp_path / "f.txt"), "--block", "8"])
        == 0
    )
    assert "140 of 141 tokens predicted (windows of 8): loss " in capsys.readouterr().out
    (tmp_path / "g.txt").write_text("the moon; is bright", encoding="utf-8")
    assert main(["evaluate", "--checkpoint", str(tmp_path / "run"), "--file", str(tmp_path / "g.txt")]) == 2
    assert (
        f"error: --file {tmp_path / 'g.txt'}: 1 character(s) are not in the tokenizer's vocabulary: ';'"
        in capsys.readouterr().err
    )


def test_file_bad_input_is_one_line(tmp_path, capsys):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n\n".join(f"verse {i}: the moon is bright tonight." for i in range(80)) + "\n")
    assert main(["train", *TINY, f"corpus={corpus}", "--out", str(tmp_path / "run")]) == 0
    (tmp_path / "latin1.txt").write_bytes("café".encode("latin-1"))
    run = str(tmp_path / "run")
    cases = [
        (["--file", str(tmp_path / "nope.txt")], f"--file file {str(tmp_path / 'nope.txt')!r} does not exist"),
        (["--file", str(tmp_path / "latin1.txt")], "is not UTF-8 text: byte 0xe9 at offset 3"),
        (["--file", str(corpus), "--split", "val"], f"give --split val (the run's own data) or --file {corpus}"),
        (["--block", "8"], "--block goes with --file"),
        (["--file", str(corpus), "--block", "17"], "--block must be between 2 and the model's max_seq_len=16"),
    ]
    capsys.readouterr()
    for extra, expected in cases:
        assert main(["evaluate", "--checkpoint", run, *extra]) == 2, extra
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and expected in err[0], (extra, err)
