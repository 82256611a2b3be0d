"""`anatomy trace` runs offline from the command line and prints the post's shape table."""

from __future__ import annotations

import json
import subprocess
import sys

from anatomy.cli.main import main
from anatomy.models import build_model


def test_trace_seed_block_scores_row_reads_2_4_10_10():
    proc = subprocess.run(
        [sys.executable, "-m", "anatomy", "trace", "--preset", "seed-block"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    scores = [line for line in proc.stdout.splitlines() if "Q K^T" in line]
    assert len(scores) == 1 and "(B=2, H=4, T=10, S=10)" in scores[0]


def test_trace_json_rows_follow_the_post(capsys):
    assert main(["trace", "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    shapes = [(r["kind"], tuple(r["shape"])) for r in rows]
    assert shapes[0] == ("embed", (2, 10, 16))
    assert ("split", (2, 4, 10, 4)) in shapes and ("scores", (2, 4, 10, 10)) in shapes
    assert ("hidden", (2, 10, 64)) in shapes and shapes[-1] == ("norm", (2, 10, 16))


def test_trace_cross_attention_has_s_different_from_t(capsys):
    assert (
        main(
            [
                "trace",
                "--preset",
                "t5",
                "--d-model",
                "32",
                "--layers",
                "1",
                "--seq",
                "6",
                "--tgt-seq",
                "4",
                "--format",
                "json",
            ]
        )
        == 0
    )
    rows = json.loads(capsys.readouterr().out)["rows"]
    cross = [r for r in rows if "cross" in r["step"] and r["kind"] == "scores"]
    assert cross and cross[0]["shape"] == [2, 8, 4, 6]


def test_every_large_vocab_preset_traces_with_its_own_vocabulary(capsys, monkeypatch):
    from anatomy.cli import trace as trace_cmd
    from anatomy.config import LOOK_VOCAB, PRESETS, large_vocab_presets

    built = []
    monkeypatch.setattr(trace_cmd, "build_model", lambda config: built.append(config) or build_model(config))
    assert "qwen3" in large_vocab_presets()  # read from the presets: a 151,936-token vocabulary
    assert set(large_vocab_presets()) == {n for n, p in PRESETS.items() if p["vocab_size"] > LOOK_VOCAB}
    assert "seed-block" not in large_vocab_presets()
    small = ["--d-model", "32", "--heads", "4", "--kv-heads", "2", "--layers", "1", "--d-ff", "64", "--format", "json"]
    for preset in large_vocab_presets():
        assert main(["trace", "--preset", preset, *small]) == 0, preset
        assert built[-1].vocab_size == PRESETS[preset]["vocab_size"], preset  # built on meta: its real V
    assert main(["trace", "--preset", "qwen3", *small, "--vocab", "77"]) == 0  # a vocabulary asked for is kept
    assert built[-1].vocab_size == 77
    capsys.readouterr()


def test_trace_bad_input_exits_2_with_one_line(capsys):
    assert main(["trace", "--heads", "3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "n_heads=3" in err[0]
    assert main(["trace", "--preset", "nope"]) == 2
    assert "valid names" in capsys.readouterr().err
    assert main(["trace", "--seq", "0"]) == 2


def test_trace_a_saved_checkpoint(tmp_path, capsys):
    import anatomy

    model = anatomy.build_model(
        anatomy.ModelConfig.from_preset(
            "llama", vocab_size=50, d_model=32, n_heads=4, n_kv_heads=2, n_layers=2, d_ff=64
        )
    )
    anatomy.save_pretrained(model, tmp_path / "ckpt")
    assert main(["trace", "--checkpoint", str(tmp_path / "ckpt"), "--seq", "6", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert "checkpoint" in doc["title"]
    kinds = [(r["kind"], r["shape"]) for r in doc["rows"] if "layer 1" in r["step"]]
    assert ("split", [2, 2, 6, 8]) in kinds and ("scores", [2, 4, 6, 6]) in kinds  # GQA: Hkv=2 keys, H=4 scores
    assert main(["trace", "--checkpoint", str(tmp_path / "ckpt"), "--heads", "2"]) == 2
    assert main(["trace", "--checkpoint", str(tmp_path / "missing")]) == 2
    assert "not a directory" in capsys.readouterr().err


def test_output_into_a_closed_pipe_ends_quietly():
    """``anatomy trace | head -1``: the reader leaves early; no BrokenPipeError traceback, SIGPIPE's exit code."""
    code = (
        "import sys; from anatomy.cli.main import main; "
        "sys.exit(main(['trace', '--preset', 'gpt2', '--d-model', '48', '--layers', '60', '--format', 'json']))"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.readline()
    proc.stdout.close()  # the reader is gone before the table is written
    _, err = proc.communicate(timeout=120)
    assert b"Traceback" not in err and b"BrokenPipeError" not in err, err.decode()
    assert proc.returncode == 141  # 60 layers of JSON rows: far more than a pipe buffer (64 KiB) holds


def test_trace_shows_qk_norm_and_wide_heads(capsys):
    assert (
        main(
            [
                "trace",
                "--preset",
                "qwen3",
                "--d-model",
                "32",
                "--heads",
                "4",
                "--kv-heads",
                "2",
                "--head-dim",
                "16",
                "--layers",
                "1",
                "--vocab",
                "50",
                "--d-ff",
                "64",
                "--format",
                "json",
            ]
        )
        == 0
    )
    rows = json.loads(capsys.readouterr().out)["rows"]
    qk = [r for r in rows if r["kind"] == "qknorm"]
    assert [(r["dims"], r["params"]) for r in qk] == [
        ("(B=2, H=4, T=10, Dh=16)", 16),
        ("(B=2, Hkv=2, S=10, Dh=16)", 16),
    ]
    q_proj = next(r for r in rows if r["operation"] == "linear projection Q")
    assert q_proj["dims"] == "(B=2, T=10, H*Dh=64)"


LEARNERS = __import__("pathlib").Path(__file__).parents[1] / "doctor" / "zoo_learners"


def test_trace_a_learners_module_prints_its_lines(capsys):
    assert main(["trace", f"{LEARNERS / 'trace_heads_loop.py'}:MultiHeadAttention"]) == 0
    out = capsys.readouterr().out
    assert "wei = F.softmax(wei, dim=-1)" in out and "(B, T, S) = (2, 7, 7)" in out
    assert "no step leaves it" in out


def test_trace_marks_the_first_step_that_leaves_the_post(capsys):
    target = f"{LEARNERS / 'trace_split_no_transpose.py'}:MultiHeadAttention"
    assert main(["trace", target]) == 1
    out = capsys.readouterr().out
    marked = [line for line in out.splitlines() if line.rstrip().endswith("<<")]
    assert len(marked) == 1 and "torch.matmul(q, k.transpose(-2, -1))" in marked[0] and "(B, T, H, H)" in marked[0]
    assert main(["trace", target, "--lang", "zh"]) == 1
    assert "博文的做法" in capsys.readouterr().out
    assert main(["trace", target, "--format", "json", "--d-model", "20", "--heads", "4", "--seq", "5"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["deviation"]["dims"] == "(B, T, H, H)" and doc["sizes"]["D"] == 20
    assert main(["trace", target, "--format", "markdown"]) == 1
    assert capsys.readouterr().out.startswith("**anatomy trace")


def test_trace_a_factory(tmp_path, capsys):
    src = tmp_path / "fac.py"
    src.write_text("import torch.nn as nn\n\ndef make(d, h):\n    return nn.Sequential(nn.Linear(d, d), nn.ReLU())\n")
    assert main(["trace", str(src), "--factory", "make", "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert [r["op"] for r in rows] == ["linear", "relu"]


def test_trace_learner_bad_input_exits_2_with_one_line(tmp_path, capsys):
    for argv, expect in (
        (["trace", str(tmp_path / "no.py") + ":A"], "no such file"),
        (["trace", f"{LEARNERS / 'trace_block.py'}:Nope"], "it defines: Block"),
        (["trace", f"{LEARNERS / 'trace_block.py'}:Block", "--preset", "bert"], "not both"),
        (["trace", f"{LEARNERS / 'trace_block.py'}:Block", "--layers", "2"], "--layers applies"),
        (["trace", "--factory", "make"], "needs FILE.py"),
    ):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and expect in err[0], err
