"""The model's forward contract and construction, on the forms real models take (contract.py, build.py, check.py):
a model that insists on float32 (nanochat asserts its rotary tables' dtype), needs a wider stream than d_model=16
(a gate reading 24 channels), pads its vocabulary and crops the logits, and returns the loss alone with targets;
a stack that is a run of blocks inside an nn.Sequential (PaLM); a config's multiple_of."""

from __future__ import annotations

from pathlib import Path

import torch

from anatomy.doctor import check
from anatomy.doctor.model.build import Sizes, make_config
from tests.doctor.model.styles import HERE

NANOCHAT_LIKE = """
from dataclasses import dataclass
import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class GPTConfig:
    sequence_len: int = 64
    vocab_size: int = 100
    n_layer: int = 2
    n_head: int = 2
    n_embd: int = 64


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.n_head = c.n_head
        self.qkv = nn.Linear(c.n_embd, 3 * c.n_embd, bias=False)
        self.proj = nn.Linear(c.n_embd, c.n_embd, bias=False)
        self.fc = nn.Linear(c.n_embd, 4 * c.n_embd, bias=False)
        self.out = nn.Linear(4 * c.n_embd, c.n_embd, bias=False)

    def forward(self, x, cos_sin):
        b, t, d = x.shape
        h = F.rms_norm(x, (d,))
        q, k, v = (z.view(b, t, self.n_head, -1).transpose(1, 2) for z in self.qkv(h).split(d, dim=-1))
        cos, sin = cos_sin
        q, k = q * cos + q.flip(-1) * sin, k * cos + k.flip(-1) * sin
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.out(F.relu(self.fc(F.rms_norm(x, (d,)))).square())


class GPT(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        padded = (config.vocab_size + 63) // 64 * 64  # the vocabulary padded, the logits cropped in forward
        self.wte = nn.Embedding(padded, config.n_embd)
        self.blocks = nn.ModuleList([Block(config) for _ in range(config.n_layer)])
        self.gate = nn.Linear(24, 1, bias=False)  # reads the first 24 channels: d_model must be >= 24
        self.lm_head = nn.Linear(config.n_embd, padded, bias=False)
        hd = config.n_embd // config.n_head
        angles = torch.outer(torch.arange(config.sequence_len * 2).float(), torch.rand(hd))
        self.register_buffer("cos", angles.cos()[None, None], persistent=False)
        self.register_buffer("sin", angles.sin()[None, None], persistent=False)

    def forward(self, idx, targets=None):
        t = idx.shape[1]
        assert self.cos.dtype == torch.float32, f"rotary tables must be float32, got {self.cos.dtype}"
        x = self.wte(idx)
        x = x + torch.sigmoid(self.gate(x[..., :24])) * F.pad(x[:, :-1], (0, 0, 1, 0))  # the previous token
        for block in self.blocks:
            x = block(x, (self.cos[..., :t, :], self.sin[..., :t, :]))
        logits = self.lm_head(F.rms_norm(x, (x.shape[-1],)))[..., : self.config.vocab_size].float()
        if targets is not None:
            return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        return logits
"""


def test_a_model_that_insists_on_float32_and_a_wider_stream_and_crops_its_vocabulary(tmp_path: Path) -> None:
    path = tmp_path / "chat_gpt.py"
    path.write_text(NANOCHAT_LIKE, encoding="utf-8")
    report = check(f"{path}:GPT", kind="lm")
    assert report.errors == [], report.render()
    assert report.settings["dtype"] == "float32" and report.settings["d_model"] == 64
    assert report.settings["vocab_size"] == 29  # the logits' width, not the padded embedding's 64 rows
    notes = " ".join(n["en"] for n in report.found["call_notes"])
    assert "float64" in notes and "d_model = 64" in notes and "cropped" in notes
    assert report.found["loss"]["shift"] == 0  # the loss alone with targets, the logits from a plain call


def test_the_same_model_with_a_causal_leak_is_still_named(tmp_path: Path) -> None:
    path = tmp_path / "chat_gpt.py"
    path.write_text(NANOCHAT_LIKE.replace("is_causal=True", "is_causal=False"), encoding="utf-8")
    report = check(f"{path}:GPT", kind="lm")
    assert any(f.probe == "lm_causal_leak" for f in report.errors), report.render()


def test_a_run_of_blocks_inside_a_sequential_is_the_stack() -> None:
    zoo = HERE.parent / "zoo_models" / "palm_lucidrains.py"
    report = check(str(zoo), kind="lm", factory="tiny_palm")
    assert report.found["stack"] == {"path": "", "count": 3, "class": "Residual"}
    assert [row["path"] for row in report.layers] == ["1", "2", "3"]  # after the embedding at index 0


def test_a_configs_multiple_of_is_set_small() -> None:
    class Args:
        def __init__(self, dim: int = 4096, multiple_of: int = 256) -> None:
            self.dim, self.multiple_of = dim, multiple_of

    cfg = make_config(Args, Sizes())
    assert cfg.dim == 16 and cfg.multiple_of == 8


def test_float32_islands_raise_the_tolerance() -> None:
    from anatomy.doctor.model.contract import LM

    lm = LM(torch.nn.Identity(), "x", Sizes(), None)
    assert lm.tol(1e-7) == 1e-7
    with lm.running():
        torch.zeros(2, dtype=torch.float32) + 1
    assert torch.float32 in lm.dtypes and lm.tol(1e-7) > 1e-5
