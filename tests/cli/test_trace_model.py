"""``anatomy trace my_gpt.py:GPT`` (``anatomy/cli/trace_model.py``): a whole model found by how it is built, or named
with ``--kind lm``; its table in text, Chinese and JSON; the module trace unchanged for a block; bad input in one
line."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from anatomy.cli.main import main

GPT = textwrap.dedent(
    """
    import torch
    from torch import nn
    from torch.nn import functional as F


    class Attention(nn.Module):
        def __init__(self, d_model, n_heads):
            super().__init__()
            self.h = n_heads
            self.qkv = nn.Linear(d_model, 3 * d_model)
            self.proj = nn.Linear(d_model, d_model)

        def forward(self, x):
            b, t, d = x.shape
            q, k, v = self.qkv(x).view(b, t, 3, self.h, d // self.h).permute(2, 0, 3, 1, 4)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.proj(y.transpose(1, 2).reshape(b, t, d))


    class Block(nn.Module):
        def __init__(self, d_model, n_heads):
            super().__init__()
            self.n1, self.n2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
            self.attn = Attention(d_model, n_heads)
            self.ff = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))

        def forward(self, x):
            x = x + self.attn(self.n1(x))
            return x + self.ff(self.n2(x))


    class TinyGPT(nn.Module):
        def __init__(self, vocab_size, d_model, n_heads, n_layers, block_size):
            super().__init__()
            self.tok = nn.Embedding(vocab_size, d_model)
            self.pos = nn.Parameter(torch.zeros(1, block_size, d_model))
            self.blocks = nn.Sequential(*[Block(d_model, n_heads) for _ in range(n_layers)])
            self.norm = nn.LayerNorm(d_model)
            self.head = nn.Linear(d_model, vocab_size)

        def forward(self, ids, y=None):
            x = self.tok(ids) + self.pos[:, : ids.shape[1]]
            logits = self.head(self.norm(self.blocks(x)))
            if y is None:
                return logits
            return logits, F.cross_entropy(logits.flatten(0, 1), y.flatten())
    """
)


def _write(tmp_path, source: str = GPT) -> str:
    path = tmp_path / "tiny_gpt.py"
    path.write_text(source)
    return str(path)


def test_a_whole_model_is_found_and_traced(tmp_path, capsys):
    path = _write(tmp_path)
    assert main(["trace", f"{path}:TinyGPT"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("anatomy trace · tiny_gpt.py:TinyGPT · forward(ids, y=y) · B=2, T=7, H=5, Dh=4, D=20, V=29")
    assert "── blocks 0-2 (Block) × 3: alike ──" in out and "L=3" in out
    pos = next(line for line in out.splitlines() if "x = self.tok(ids) + self.pos" in line and " add " in line)
    assert "positions enter here" in pos and "(B, T, D) = (2, 7, 20)" in pos
    assert "scaled_dot_product_attention" in out and "head → logits" in out
    assert "loss: logits (B, T, V) vs y (B, T)" in out and "no shift inside the model" in out
    assert main(["trace", f"{path}:TinyGPT", "--lang", "zh", "--layers", "2", "--vocab", "37"]) == 0
    out = capsys.readouterr().out
    assert "第 0-1 层 (Block) × 2：完全相同" in out and "V=37" in out and "损失：logits (B, T, V) 对 y (B, T)" in out


def test_json_and_kinds(tmp_path, capsys):
    path = _write(tmp_path)
    assert main(["trace", f"{path}:TinyGPT", "--format", "json", "--kind", "lm"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["schema"] == "anatomy.trace.model/1" and d["loss"]["shift"] == 0 and d["loss"]["targets_name"] == "y"
    assert [g["part"] for g in d["groups"]] == ["embed", "block", "final", "loss"]
    # a block is still traced as a module: same table as before (--kind auto and --kind module)
    assert main(["trace", f"{path}:Block", "--format", "json"]) == 0
    block = json.loads(capsys.readouterr().out)
    assert block["schema"] == "anatomy.trace.learner/1"
    assert main(["trace", f"{path}:Block", "--format", "json", "--kind", "module"]) == 0
    assert json.loads(capsys.readouterr().out)["rows"] == block["rows"]


def test_bad_input_is_one_line(tmp_path, capsys):
    path = _write(tmp_path)
    assert main(["trace", f"{path}:Block", "--kind", "lm"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("anatomy trace: error: ") and len(err.strip().splitlines()) == 1
    proc = subprocess.run(
        [sys.executable, "-m", "anatomy", "trace", f"{path}:TinyGPT", "--d-ff", "64"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "--d-ff applies to --preset models; your model takes --vocab" in proc.stderr
    assert "Traceback" not in proc.stderr
    broken = GPT.replace("return logits, F.cross_entropy", "return logits.mean(-1), F.cross_entropy")
    assert main(["trace", f"{_write(tmp_path, broken)}:TinyGPT"]) == 2
    err = capsys.readouterr().err
    assert "returned a tensor of shape (2, 7); a language model returns logits (B, T, V=29)" in err
