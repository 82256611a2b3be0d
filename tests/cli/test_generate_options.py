"""``anatomy generate``'s size and value limits (cli/generate_options.py): one line naming the option, exit 2,
before the rows' generators or caches are made (10**7 rows once ended in std::bad_alloc, 10**30 tokens ran on)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from anatomy import ModelConfig, build_model, save_pretrained
from anatomy.cli.main import main
from anatomy.data.tokenizers import CharTokenizer


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("gen-limits") / "lm"
    tok = CharTokenizer.train(["the cat sat on the mat.\n"])
    torch.manual_seed(0)
    config = ModelConfig.from_preset(
        "gpt2", vocab_size=tok.vocab_size, d_model=16, n_heads=2, n_layers=1, d_ff=32, max_seq_len=16
    )  # a short window: long outputs take the sliding path, whose cache never grows
    save_pretrained(build_model(config), path)
    tok.save(path)
    return path


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--max-new-tokens", str(10**30)], "1 output(s) of ~10^30 tokens would need about 10^31 bytes of memory"),
        (["--num-return-sequences", str(10**9)], "lower --max-new-tokens, --num-return-sequences or the number"),
        (["--temperature", "inf"], "--temperature must be a finite number, got inf"),
        (["--num-beams", "2", "--length-penalty", "nan"], "--length-penalty must be a finite number, got nan"),
        (["--seed", str(2**70)], "--seed must be an integer in [-2**63, 2**64 - 1] (row r of the output draws with "),
    ],
)
def test_limits_are_one_line_naming_the_option(ckpt, capsys, argv, message):
    assert main(["generate", "--checkpoint", str(ckpt), "--prompt", "the ", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("anatomy generate: error: ") and message in err and err.count("\n") == 1


def test_a_seed_at_the_edge_still_runs(ckpt, capsys):
    argv = ["generate", "--checkpoint", str(ckpt), "--prompt", "the ", "--max-new-tokens", "3"]
    assert main([*argv, "--seed", str(2**64 - 2), "--num-return-sequences", "2"]) == 0
    assert main([*argv, "--seed", str(2**64 - 1), "--num-return-sequences", "2"]) == 2
    assert "--seed must be an integer in [-2**63, 2**64 - 2]" in capsys.readouterr().err
