"""``anatomy bench --quick``: runs every suite at tiny sizes in the default test run and writes valid JSON."""

from __future__ import annotations

import json
import math

import pytest

from anatomy.bench import RATIO_RULE
from anatomy.bench.peers import peer_status
from anatomy.bench.suites import QUICK, SUITES, train_step
from anatomy.bench.timing import Options
from anatomy.cli.main import build_parser, main


def test_quick_bench_writes_a_complete_json_report_and_no_profiler_noise(tmp_path, capfd):
    out = tmp_path / "bench.json"
    assert main(["bench", "--quick", "--out", str(out)]) == 0
    captured = capfd.readouterr()  # file-descriptor level: the profiler's C++ side writes "USDT" lines to fd 2
    text = captured.out
    assert "USDT" not in captured.out + captured.err and "profiler_start" not in captured.err
    report = json.loads(out.read_text())
    assert report["schema"] == "anatomy-bench/1" and report["quick"] is True and report["rounds"] == 3
    assert list(report["suites"]) == list(SUITES) == ["attention", "train_step", "decode", "memory"]
    assert report["peers"]["torch.nn"]["installed"] is True
    for suite, comparisons in report["suites"].items():
        assert comparisons and report["seconds"][suite] > 0
        for c in comparisons:
            assert c["reference"] == "ours" and c["unit"] in ("s", "bytes")
            assert c["results"]["ours"]["ratio"] == 1.0
            for who, r in c["results"].items():
                assert r["value"] > 0 and math.isfinite(r["ratio"]) and r["ratio"] > 0, (c["name"], who)
                if "throughput" in r:  # work per second, from the same median
                    work = {"tokens/s": QUICK.lm.batch * QUICK.lm.seq, "new tokens/s": QUICK.new_tokens}
                    if c["name"].startswith("decoder block"):
                        work["tokens/s"] = QUICK.lm.batch * QUICK.block_seq
                    assert r["throughput"] * r["value"] == pytest.approx(work[c["throughput_unit"]], rel=1e-9)
    names = {c["name"]: c for cs in report["suites"].values() for c in cs}
    attention = names["attention T=16 causal, forward"]["results"]
    assert {"raw sdpa (floor)", "nn.MultiheadAttention"} <= set(attention)
    assert "nn.TransformerDecoderLayer" in names["decoder block step (forward + backward + AdamW)"]["results"]
    cache = names["KV-cache bytes after a 4-token prompt and 24 new tokens"]["results"]
    assert cache["ours sliding_window=4"]["value"] < cache["ours"]["value"]
    has_hf = report["peers"]["transformers"]["installed"]
    assert ("hf_gpt2" in names["LM train step (forward + backward + AdamW)"]["results"]) == has_hf
    assert ("hf_gpt2 generate" in names["greedy decode, batch 1, prompt 4, 8 new tokens"]["results"]) == has_hf
    for module, pip in report["missing_peers"].items():  # a missing peer is named with its pip line
        assert pip.startswith("pip install ") and f"{module:<15} not installed: {pip}" in text
    assert RATIO_RULE in text and f"wrote {out}" in text
    assert report["load"]["cores"] >= 1 and len(report["load"]["samples"]) == len(SUITES) + 1


def test_a_missing_peer_is_left_out_and_named():
    status = peer_status()
    status["transformers"] = {"installed": False, "pip": "pip install transformers"}
    notes: list[str] = []
    comparisons = train_step(QUICK, Options(rounds=1, repeat=1), status, notes)
    assert set(comparisons[0]["results"]) <= {"ours", "x_transformers"}
    assert set(comparisons[2]["results"]) == {"ours", "nn.TransformerDecoderLayer"}


def test_bad_input_is_one_line_and_nothing_is_overwritten(tmp_path, capsys):
    existing = tmp_path / "mine.json"
    existing.write_text("keep me")
    assert main(["bench", "--quick", "--out", str(existing)]) == 2
    assert existing.read_text() == "keep me"
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--out" in err and "--force" in err
    assert main(["bench", "--quick", "--out", str(tmp_path / "b.txt")]) == 2
    assert main(["bench", "--quick", "--rounds", "0"]) == 2
    assert "--rounds must be an integer from 1 to 1000" in capsys.readouterr().err
    assert main(["bench", "--quick", "--out", str(tmp_path / "no" / "b.json")]) == 2
    assert main(["bench", "--quick", "--only", "decode", "--out", str(existing), "--force"]) == 0
    assert list(json.loads(existing.read_text())["suites"]) == ["decode"]
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", "--only", "everything"])
    assert exit_info.value.code == 2


def test_the_cli_help_names_bench():
    assert "bench" in build_parser().format_help()


def test_a_peer_that_fails_to_build_or_run_is_left_out_with_a_note(monkeypatch):
    from anatomy.bench import peers

    def broken(size):
        raise TypeError("unexpected keyword argument 'attn_flash'")

    monkeypatch.setitem(peers.LM_PEERS, "x_transformers", ("x_transformers", broken))
    status = peer_status()
    status["x_transformers"] = {"installed": True, "version": "0.0"}
    notes: list[str] = []
    models = peers.language_models(QUICK.lm, status, notes)
    assert "x_transformers" not in models and "ours" in models
    assert notes == [
        "x_transformers left out: building or calling it failed (TypeError: unexpected keyword argument 'attn_flash')"
    ]
