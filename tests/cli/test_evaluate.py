"""`anatomy evaluate`: one line (or JSON) with the checkpoint's metrics; bad input exits 2 with one line."""

from __future__ import annotations

import json

from anatomy.cli.main import main

TINY = ["task=lm", "d_model=16", "n_heads=2", "n_layers=1", "d_ff=32", "batch_size=4", "block_size=16",
        "eval_batches=2", "warmup_steps=2", "progress=false", "plot=false", "steps=4", "eval_every=4", "save_every=4"]


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
