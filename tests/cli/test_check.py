"""`anatomy check` from the command line: exit codes 0/1/2, text in English and Chinese, JSON, --map, --factory."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from anatomy.cli.main import main

ZOO = Path(__file__).parents[1] / "doctor" / "zoo"


def z(target: str) -> str:
    return str(ZOO / target)


def test_check_runs_from_the_command_line():
    proc = subprocess.run(
        [sys.executable, "-m", "anatomy", "check", z("separate_attention.py:NoScaling"), "--details"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1, proc.stderr
    assert "no_scaling" in proc.stdout and proc.stdout.rstrip().endswith("1 error, 0 warnings → exit 1")


def test_exit_codes(capsys):
    assert main(["check", z("fused_attention.py:FusedAttention")]) == 0
    assert main(["check", z("fused_attention.py:PaddingMaskOnQueries")]) == 1
    assert main(["check", z("torch_adapter.py:TorchMHA")]) == 0  # a warning only
    assert main(["check", z("torch_adapter.py:TorchMHA"), "--strict"]) == 1
    assert main(["check", z("separate_attention.py:CausalOffByOne"), "--causal"]) == 1
    assert main(["check", z("separate_block.py:NoResidual"), "--kind", "block"]) == 1
    capsys.readouterr()


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["broken.py:Raises"], "raised RuntimeError"),
        (["broken.py:ReturnsDict"], "returned dict"),
        (["broken.py:NeedsConfig"], "CLASS(d_model, n_heads)"),
        (["separate_attention.py"], "expected FILE.py:CLASS"),
        (["fused_attention.py:FusedAttention", "--heads", "5"], "d_model=16 must be divisible by n_heads=5"),
        (["other_styles.py:Renamed", "--map", "{oops"], "--map: not valid JSON"),
        (["other_styles.py:Renamed", "--map", "/nonexistent/map.json"], "--map: cannot read"),
        (["other_styles.py:Renamed", "--map", '{"a": ' + "[" * 50_000], "--map: nested too deeply"),
    ],
)
def test_unusable_input_exits_2_with_one_line(capsys, argv, expected):
    assert main(["check", z(argv[0]), *argv[1:]]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and expected in err[0] and err[0].startswith("anatomy check: error: ")
    assert captured.out == ""


def test_text_report_in_chinese(capsys):
    assert main(["check", z("fused_block.py:SharedLayerNorm"), "--lang", "zh", "--details"]) == 1
    out = capsys.readouterr().out
    assert "两个子层共用一个 LayerNorm" in out and "每一个LayerNorm都需要分别拥有自己的可学习参数" in out
    assert "1 个错误，0 个警告 → 退出码 1" in out


def test_json_report(capsys):
    assert main(["check", z("separate_attention.py:MergeWrongTranspose"), "--format", "json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["schema"] == "anatomy.doctor/1" and report["faults"] == ["merge_wrong_transpose"]
    assert report["summary"]["exit_code"] == 1 and report["diagnosis"]["fault"] == "merge_wrong_transpose"
    diag = next(f for f in report["findings"] if f["probe"] == "diagnosis")
    assert diag["evidence"]["max_abs_diff_vs_faulty_reference"] < 1e-12 and diag["message"]["zh"]


def test_map_inline_and_from_a_file(capsys, tmp_path):
    user_map = {f"{r}_proj.weight": f"{u}.weight" for r, u in zip("qkvo", ("alpha", "beta", "gamma", "delta"))}
    user_map.update({f"{r}_proj.bias": f"{u}.bias" for r, u in zip("qkvo", ("alpha", "beta", "gamma", "delta"))})
    path = tmp_path / "map.json"
    path.write_text(json.dumps(user_map))
    for value in (json.dumps(user_map), str(path)):
        assert main(["check", z("other_styles.py:Renamed"), "--map", value, "--format", "json"]) == 0
        assert json.loads(capsys.readouterr().out)["diagnosis"]["status"] == "matches"


def test_factory(capsys):
    assert main(["check", z("broken.py"), "--factory", "make_needs_config", "--details"]) == 0
    assert "make_needs_config" in capsys.readouterr().out
