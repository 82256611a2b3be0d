"""Which targets are models (read with ast, never imported twice), the CLI (`anatomy check file.py:GPT`, `--kind
lm`, `--factory`, `--json`, the model's sizes) and bad input said in one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from anatomy.doctor import CheckError, check
from anatomy.doctor.model.dispatch import is_model_target
from tests.doctor.model import nano_style
from tests.doctor.model.styles import HERE

ROOT = Path(__file__).resolve().parents[3]
NANO = HERE / "nano_style.py"


def _cli(*args: str) -> subprocess.CompletedProcess:
    """``python -m anatomy check ...`` in a process of its own (one test; the others call main() here)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "anatomy", "check", *args], capture_output=True, text=True, env=env, timeout=300
    )


def _main(capsys, *args: str) -> tuple[int, str, str]:
    from anatomy.cli.main import main

    code = main(["check", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_what_looks_like_a_model():
    assert is_model_target(f"{NANO}:GPT", None)  # GPT(config)
    assert is_model_target(f"{HERE / 'course_style.py'}:GPT", None)  # GPT(vocab_size, ...)
    assert is_model_target(f"{HERE / 'lecture_style.py'}:GPTLanguageModel", None)  # no arguments: its own sizes
    assert not is_model_target(f"{HERE / 'course_style.py'}:多头注意力", None)  # (d_model, n_heads): a block's
    assert not is_model_target("no_such_file.py:GPT", None)
    assert is_model_target(nano_style.GPT(nano_style.GPTConfig()), None)
    assert not is_model_target(nano_style.MLP(nano_style.GPTConfig()), None)


def test_a_class_and_an_instance_from_a_notebook():
    by_class = check(nano_style.GPT)
    by_instance = check(
        nano_style.GPT(nano_style.GPTConfig(vocab_size=29, n_embd=16, n_head=4, n_layer=3, block_size=12))
    )
    assert by_class.kind == by_instance.kind == "lm"
    assert by_class.errors == [] and by_instance.errors == []


def test_a_factory_keeps_its_own_sizes(tmp_path):
    path = tmp_path / "factory.py"
    path.write_text(
        f"import sys\nsys.path.insert(0, {str(HERE)!r})\nfrom nano_style import GPT, GPTConfig\n\n"
        "def make_model():\n    return GPT(GPTConfig(vocab_size=40, n_embd=24, n_head=3, n_layer=2, block_size=9))\n"
    )
    report = check(f"{path}:GPT", factory="make_model")
    assert report.kind == "lm" and report.errors == []
    assert (report.settings["vocab_size"], report.settings["d_model"], report.settings["n_heads"]) == (40, 24, 3)
    assert (report.settings["n_layers"], report.settings["block_size"]) == (2, 9)


def test_the_cli_short_answer_and_exit_codes(tmp_path):
    ok = _cli(f"{NANO}:GPT")
    assert ok.returncode == 0 and ok.stdout.startswith("✓ PASS"), ok.stderr
    src = NANO.read_text().replace("x = self.transformer.drop(tok_emb + pos_emb)", "x = self.transformer.drop(tok_emb)")
    bad = tmp_path / "bad.py"
    bad.write_text(src)
    out = _cli(f"{bad}:GPT", "--kind", "lm", "--lang", "zh")
    assert out.returncode == 1 and "✗ 还不对：模型没有位置信息" in out.stdout
    assert "bad.py 第" in out.stdout


def test_the_cli_json_and_sizes(capsys):
    _, out, _ = _main(
        capsys, f"{NANO}:GPT", "--format", "json", "--layers", "6", "--vocab-size", "31", "--block-size", "10"
    )
    d = json.loads(out)
    assert d["kind"] == "lm" and len(d["layers"]) == 6 and d["settings"]["vocab_size"] == 31
    assert d["summary"]["exit_code"] == 0 and all("layers" in f for f in d["findings"])


def test_the_cli_factory(tmp_path, capsys):
    path = tmp_path / "factory.py"
    path.write_text(
        f"import sys\nsys.path.insert(0, {str(HERE)!r})\nfrom nano_style import GPT, GPTConfig\n\n"
        "def build():\n    return GPT(GPTConfig(vocab_size=29, n_embd=16, n_head=4, n_layer=2, block_size=12))\n"
    )
    code, out, err = _main(capsys, f"{path}:GPT", "--factory", "build", "--kind", "lm", "--details")
    assert code == 0 and "transformer.h: 2 × Block" in out, err


@pytest.mark.parametrize(
    ("source", "says"),
    [
        (
            "import torch\nclass GPT(torch.nn.Module):\n    def __init__(self, a, b, c, d):\n"
            "        super().__init__()\n",
            "cannot tell how to build it from (a, b, c, d)",
        ),
        (
            "import torch\nclass GPT(torch.nn.Module):\n    def __init__(self, vocab_size, d_model):\n"
            "        super().__init__()\n        self.e = torch.nn.Embedding(vocab_size, d_model)\n"
            "    def forward(self, idx):\n        raise ValueError('not yet')\n",
            "raised ValueError: not yet; expected it to return logits (B, T, V)",
        ),
        (
            "import torch\nclass GPT(torch.nn.Module):\n    def __init__(self, vocab_size, d_model):\n"
            "        super().__init__()\n        self.e = torch.nn.Embedding(vocab_size, d_model)\n"
            "    def forward(self, idx):\n        return self.e(idx)\n",
            "returned a tensor of shape (2, 7, 16); expected logits (B, T, V)",
        ),
    ],
)
def test_bad_models_are_one_line_errors(tmp_path, capsys, source, says):
    path = tmp_path / "gpt.py"
    path.write_text(source)
    with pytest.raises(CheckError, match=None) as err:
        check(f"{path}:GPT", kind="lm")
    assert says in str(err.value) and "\n" not in str(err.value)
    code, out, err = _main(capsys, f"{path}:GPT", "--kind", "lm")
    assert code == 2 and out == "" and says in err and err.count("\n") == 1


def test_bad_sizes_on_the_cli(capsys):
    code, _, err = _main(capsys, f"{NANO}:GPT", "--layers", "0")
    assert code == 2 and "n_layers must be a positive integer, got 0" in err
    code, _, err = _main(capsys, f"{NANO}:Nope", "--kind", "lm")
    assert code == 2 and "has no 'Nope'" in err


def test_a_class_inheriting_its_init_is_a_model_target(tmp_path):
    path = tmp_path / "child.py"
    path.write_text(
        "from torch import nn\n\n\nclass Base(nn.Module):\n    def __init__(self, config):\n"
        "        super().__init__()\n"
        "\n\nclass Child(Base):\n    def forward(self, ids):\n        return ids\n\n\nclass Grandchild(Child):\n"
        "    pass\n"
    )
    assert is_model_target(f"{path}:Child", None) and is_model_target(f"{path}:Grandchild", None)


def test_a_model_built_from_a_config_says_its_own_build_error(tmp_path):
    """google/gemma_pytorch's GemmaForCausalLM(config) fails to build without its tokenizer file: in auto mode the
    model's error is said (the block doctor's CLASS(d_model, n_heads) cannot build a config-only class either, and
    its "takes 2 positional arguments" said nothing useful)."""
    path = tmp_path / "sampler_lm.py"
    path.write_text(
        "from dataclasses import dataclass\nimport torch\n\n\n@dataclass\nclass SamplerConfig:\n"
        "    vocab_size: int = 100\n    hidden_size: int = 32\n    tokenizer: str = 'tokenizer/tokenizer.model'\n\n\n"
        "class SamplerLM(torch.nn.Module):\n    def __init__(self, config: SamplerConfig):\n"
        "        super().__init__()\n"
        "        assert config.tokenizer is None, config.tokenizer\n"
        "        self.embedder = torch.nn.Embedding(config.vocab_size, config.hidden_size)\n"
    )
    with pytest.raises(CheckError) as err:
        check(f"{path}:SamplerLM")
    assert "SamplerLM(SamplerConfig(...)) failed: AssertionError: tokenizer/tokenizer.model" in str(err.value)
