"""``anatomy trace my_gpt.py:GPT``: the whole model's table (``anatomy/doctor/trace/model_trace.py``) on models
written in three styles: nanoGPT (a config dataclass, a fused q|k|v, a tied head, targets shifted by the caller),
LLaMA (ModelArgs, RMSNorm, rotary positions, SwiGLU, the shift inside the loss), minGPT (a CfgNode-like config, a
ModuleDict MLP run through a lambda, Hugging Face's ``labels`` shifted inside); blocks alike are shown once "× L",
blocks that differ are not."""

from __future__ import annotations

import json
import textwrap

import pytest

from anatomy.doctor import CheckError
from anatomy.doctor.trace.model_trace import ModelSizes, NotAModel, trace_if_model, trace_model

NANO = """
import math
from dataclasses import dataclass
import torch
from torch import nn
from torch.nn import functional as F


@dataclass
class GPTConfig:
    block_size: int = 256
    vocab_size: int = 65
    n_layer: int = 6
    n_head: int = 6
    n_embd: int = 384


class SelfAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.qkv = nn.Linear(cfg.n_embd, 3 * cfg.n_embd)
        self.out = nn.Linear(cfg.n_embd, cfg.n_embd)
        self.heads = cfg.n_head
        causal = torch.tril(torch.ones(cfg.block_size, cfg.block_size))
        self.register_buffer("causal", causal.view(1, 1, cfg.block_size, cfg.block_size))

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q = q.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        k = k.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        v = v.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        att = q @ k.transpose(-2, -1) / math.sqrt(k.size(-1))
        att = att.masked_fill(self.causal[:, :, :t, :t] == 0, float("-inf"))
        att = att.softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        return self.out(y)


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.n_embd)
        self.attn = SelfAttention(cfg)
        self.ln2 = nn.LayerNorm(cfg.n_embd)
        self.up = nn.Linear(cfg.n_embd, 4 * cfg.n_embd)
        self.down = nn.Linear(4 * cfg.n_embd, cfg.n_embd)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        x = x + self.down(F.gelu(self.up(self.ln2(x))))
        return x


class GPT(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.wpe = nn.Embedding(cfg.block_size, cfg.n_embd)
        self.h = nn.ModuleList([Block(cfg) for _ in range(cfg.n_layer)])
        self.ln_f = nn.LayerNorm(cfg.n_embd)
        self.head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        self.head.weight = self.wte.weight

    def forward(self, idx, targets=None):
        pos = torch.arange(idx.shape[1])
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        logits = self.head(self.ln_f(x))
        if targets is None:
            return logits, None
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss
"""

LLAMA = """
import math
from dataclasses import dataclass
import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class ModelArgs:
    dim: int = 512
    n_layers: int = 8
    n_heads: int = 8
    vocab_size: int = 32000
    max_seq_len: int = 1024


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotary_table(head_dim, length):
    inv = 1.0 / (10000 ** (torch.arange(0, head_dim, 2).double() / head_dim))
    angles = torch.outer(torch.arange(length).double(), inv)
    return angles.cos(), angles.sin()


def rotate(x, cos, sin):
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)


class Attention(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.h, self.dh = args.n_heads, args.dim // args.n_heads
        self.wq = nn.Linear(args.dim, args.dim, bias=False)
        self.wk = nn.Linear(args.dim, args.dim, bias=False)
        self.wv = nn.Linear(args.dim, args.dim, bias=False)
        self.wo = nn.Linear(args.dim, args.dim, bias=False)

    def forward(self, x, cos, sin, mask):
        b, t, _ = x.shape
        q = self.wq(x).view(b, t, self.h, self.dh).transpose(1, 2)
        k = self.wk(x).view(b, t, self.h, self.dh).transpose(1, 2)
        v = self.wv(x).view(b, t, self.h, self.dh).transpose(1, 2)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.dh)
        if mask is not None:
            scores = scores + mask
        out = scores.softmax(-1) @ v
        return self.wo(out.transpose(1, 2).reshape(b, t, -1))


class TransformerBlock(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.attention_norm = RMSNorm(args.dim)
        self.attention = Attention(args)
        self.ffn_norm = RMSNorm(args.dim)
        self.w1 = nn.Linear(args.dim, 3 * args.dim, bias=False)
        self.w3 = nn.Linear(args.dim, 3 * args.dim, bias=False)
        self.w2 = nn.Linear(3 * args.dim, args.dim, bias=False)

    def forward(self, x, cos, sin, mask):
        h = x + self.attention(self.attention_norm(x), cos, sin, mask)
        g = self.ffn_norm(h)
        return h + self.w2(F.silu(self.w1(g)) * self.w3(g))


class Transformer(nn.Module):
    def __init__(self, params: ModelArgs):
        super().__init__()
        self.tok_embeddings = nn.Embedding(params.vocab_size, params.dim)
        self.layers = nn.ModuleList(TransformerBlock(params) for _ in range(params.n_layers))
        self.norm = RMSNorm(params.dim)
        self.output = nn.Linear(params.dim, params.vocab_size, bias=False)
        self.cos, self.sin = rotary_table(params.dim // params.n_heads, params.max_seq_len)

    def forward(self, tokens, targets=None):
        t = tokens.shape[1]
        h = self.tok_embeddings(tokens)
        cos, sin = self.cos[:t], self.sin[:t]
        mask = torch.full((t, t), float("-inf")).triu(1)
        for i, layer in enumerate(self.layers):
            h = layer(h, cos, sin, MASK_ARG)
        logits = self.output(self.norm(h))
        if targets is None:
            return logits
        loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.size(-1)), targets[:, 1:].reshape(-1))
        return logits, loss
"""

MINGPT = """
import math
import torch
from torch import nn
from torch.nn import functional as F


class CfgNode:
    vocab_size = None
    block_size = None
    n_layer = 12
    n_head = 12
    n_embd = 768

    def __init__(self, **kwargs):
        self.__dict__.update(kwargs)


class CausalSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd)
        self.n_head = config.n_head
        self.register_buffer("bias", torch.tril(torch.ones(config.block_size, config.block_size)))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).chunk(3, dim=-1)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:T, :T] == 0, float("-inf"))
        y = F.softmax(att, dim=-1) @ v
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd)
        self.mlp = nn.ModuleDict(
            dict(c_fc=nn.Linear(config.n_embd, 4 * config.n_embd), c_proj=nn.Linear(4 * config.n_embd, config.n_embd))
        )
        m = self.mlp
        self.mlpf = lambda x: m.c_proj(F.gelu(m.c_fc(x)))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlpf(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.transformer = nn.ModuleDict(
            dict(
                wte=nn.Embedding(config.vocab_size, config.n_embd),
                wpe=nn.Embedding(config.block_size, config.n_embd),
                h=nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
                ln_f=nn.LayerNorm(config.n_embd),
            )
        )
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)

    def forward(self, idx, labels=None):
        pos = torch.arange(0, idx.size(1), dtype=torch.long).unsqueeze(0)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        loss = None
        if labels is not None:
            shift_logits = logits[..., :-1, :].contiguous()
            shift_labels = labels[..., 1:].contiguous()
            loss = F.cross_entropy(shift_logits.view(-1, shift_logits.size(-1)), shift_labels.view(-1))
        return logits, loss
"""


def _file(tmp_path, name: str, source: str) -> str:
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(source))
    return str(path)


def _line(source: str, text: str) -> int:
    return next(i for i, line in enumerate(textwrap.dedent(source).splitlines(), 1) if text in line)


def _labels(group) -> list[str]:
    return [row.label or row.kind for row in group.rows]


def test_nanogpt_style_blocks_alike_tied_head_and_targets_not_shifted(tmp_path):
    t = trace_model(_file(tmp_path, "nano", NANO) + ":GPT")
    assert [g.part for g in t.groups] == ["embed", "block", "final", "loss"]
    embed, blocks, final, loss = t.groups
    assert _labels(embed) == ["tok", "pos", "pos_in"]
    assert [row.dims for row in embed.rows] == ["(B, T, D)", "(T, D)", "(B, T, D)"]
    assert embed.rows[2].line == _line(NANO, "x = self.wte(idx) + self.wpe(pos)")
    assert blocks.layers == [0, 1, 2] and blocks.block_type == "Block" and blocks.path == "h.0"
    kinds = _labels(blocks)
    for kind in ("norm", "proj", "split", "scores", "scale", "mask", "softmax", "z", "merge", "out", "add", "hidden"):
        assert kind in kinds, kind
    assert kinds.count("add") == 2 and all(row.layers == [0, 1, 2] for row in blocks.rows)
    assert ("(B, H, T, S)", [2, 5, 7, 7]) in [(row.dims, row.shape) for row in blocks.rows]
    assert _labels(final) == ["final_norm", "tied_head"] and final.rows[-1].dims == "(B, T, V)"
    assert "loss" in _labels(loss)
    assert (t.loss.shift, t.loss.logits, t.loss.targets) == (0, "logits", "targets")
    assert (t.loss.logits_dims, t.loss.targets_dims) == ("(B, T, V)", "(B, T)")
    text = t.render()
    assert "blocks 0-2 (Block) × 3: alike" in text and "L=3" in text
    assert "loss: logits (B, T, V) vs targets (B, T)" in text
    assert "compares position t with targets[t]: no shift inside the model" in text
    zh = t.render(lang="zh")
    assert "第 0-2 层 (Block) × 3：完全相同" in zh and "模型内部没有错位" in zh and "与词元嵌入共享权重" in zh
    assert t.deviation is None and t.call == "forward(ids, targets=targets)"


def test_llama_style_rotary_positions_and_the_shift_inside_the_loss(tmp_path):
    source = LLAMA.replace("MASK_ARG", "mask")
    t = trace_model(_file(tmp_path, "llama", source) + ":Transformer")
    embed, blocks, final, loss = t.groups
    assert _labels(embed) == ["tok"]  # rotary positions enter inside the attention, not here
    assert blocks.layers == [0, 1, 2] and blocks.block_type == "TransformerBlock"
    rotary = [row for row in blocks.rows if row.label == "pos_in"]
    assert rotary and {row.line for row in rotary} == {_line(source, "return torch.stack((x1 * cos")}
    assert _labels(final)[-2:] == ["final_norm", "head"]
    assert (t.loss.shift, t.loss.logits, t.loss.logits_dims) == (1, "logits[:, :-1]", "(B, T-1, V)")
    assert (t.loss.targets, t.loss.targets_dims) == ("targets[:, 1:]", "(B, T-1)")
    shift = [row for row in loss.rows if row.label == "shift"]
    assert [row.dims for row in shift] == ["(B, T-1, V)", "(B, T-1)"]
    assert "(B*(T-1), V)" in [row.dims for row in loss.rows]
    text = t.render()
    assert "loss: logits[:, :-1] (B, T-1, V) vs targets[:, 1:] (B, T-1)" in text
    assert "position t predicts token t+1" in text


def test_blocks_that_differ_are_not_collapsed_and_the_table_says_where(tmp_path):
    source = LLAMA.replace("MASK_ARG", "mask if i == 0 else None")  # the mask reaches the first layer only
    t = trace_model(_file(tmp_path, "llama_first_mask", source) + ":Transformer")
    blocks = [g for g in t.groups if g.part == "block"]
    assert [g.layers for g in blocks] == [[0], [1, 2]]
    assert "mask" in _labels(blocks[0]) and "mask" not in _labels(blocks[1])
    en, zh = blocks[1].differs
    assert en.startswith("differs from layers 0 at its row") and "softmax" in en
    assert "与第 0 层在第" in zh
    text = t.render()
    assert "── block 0 (TransformerBlock) ──" in text and "blocks 1-2 (TransformerBlock) × 2: alike" in text


def test_mingpt_style_config_node_and_labels_shifted_inside(tmp_path):
    t = trace_model(_file(tmp_path, "mingpt", MINGPT) + ":GPT")
    assert t.call == "forward(ids, labels=labels)"
    blocks = [g for g in t.groups if g.part == "block"]
    assert len(blocks) == 1 and blocks[0].layers == [0, 1, 2] and blocks[0].path == "transformer.h.0"
    assert "hidden" in _labels(blocks[0]) and "ffn" in _labels(blocks[0])  # the MLP through a lambda
    assert (t.loss.shift, t.loss.logits, t.loss.targets) == (1, "logits[:, :-1]", "labels[:, 1:]")
    assert _labels(t.groups[-2]) == ["final_norm", "head"]  # not tied: its own weight


def test_targets_shifted_twice_and_a_model_without_targets(tmp_path):
    twice = LLAMA.replace("MASK_ARG", "mask").replace(
        "logits[:, :-1].reshape(-1, logits.size(-1)), targets[:, 1:]",
        "logits[:, :-2].reshape(-1, logits.size(-1)), targets[:, 2:]",
    )
    t = trace_model(_file(tmp_path, "twice", twice) + ":Transformer")
    assert (t.loss.shift, t.loss.logits, t.loss.targets) == (2, "logits[:, :-2]", "targets[:, 2:]")
    assert "shifted 2 times (once is right)" in t.render()
    plain = NANO.replace("def forward(self, idx, targets=None):", "def forward(self, idx):").replace(
        "if targets is None:", "if True:"
    )
    t = trace_model(_file(tmp_path, "plain", plain) + ":GPT")
    assert t.call == "forward(ids)" and not t.loss.found and [g.part for g in t.groups][-1] == "final"
    assert "no loss: the forward takes no targets" in t.render()


def test_positions_added_after_the_blocks_and_an_embedding_scaled_twice_show_where(tmp_path):
    late = NANO.replace("x = self.wte(idx) + self.wpe(pos)", "x = self.wte(idx)").replace(
        "logits = self.head(self.ln_f(x))", "logits = self.head(self.ln_f(x + self.wpe(pos)))"
    )
    t = trace_model(_file(tmp_path, "late", late) + ":GPT")
    embed, _blocks, final = t.groups[:3]
    assert _labels(embed) == ["tok"] and _labels(final) == ["pos", "pos_in", "final_norm", "tied_head"]
    assert final.rows[1].line == _line(late, "logits = self.head(self.ln_f(x + self.wpe(pos)))")
    twice = NANO.replace(
        "x = self.wte(idx) + self.wpe(pos)",
        "x = self.wte(idx) * math.sqrt(self.wte.embedding_dim)\n        x = x * math.sqrt(x.shape[-1]) + self.wpe(pos)",
    )
    t = trace_model(_file(tmp_path, "twice", twice) + ":GPT")
    scales = [row for row in t.groups[0].rows if row.label == "scale"]
    assert [row.detail for row in scales] == ["×4.47 (√D)", "×4.47 (√D)"]
    assert "scale ×4.47 (√D)" in t.render() and "缩放 ×4.47 (√D)" in t.render(lang="zh")


def test_a_loss_kept_on_the_model_instead_of_returned(tmp_path):
    # llama2.c's Transformer returns the logits only and keeps the loss in self.last_loss
    kept = NANO.replace("        return logits, loss\n", "        self.last_loss = loss\n        return logits\n")
    t = trace_model(_file(tmp_path, "kept", kept) + ":GPT")
    assert t.loss.found and (t.loss.shift, t.loss.logits, t.loss.targets) == (0, "logits", "targets")
    assert "loss" in _labels(t.groups[-1])


def test_a_block_that_leaves_the_posts_flow_is_marked_with_its_layer(tmp_path):
    slip = NANO.replace("y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)", "y = (att @ v).reshape(b, t, c)")
    t = trace_model(_file(tmp_path, "slip", slip) + ":GPT")
    line = _line(slip, "y = (att @ v).reshape(b, t, c)")
    assert t.deviation is not None and (t.deviation["layer"], t.deviation["line"]) == (0, line)
    assert t.deviation["kind"] == "view" and {d["layer"] for d in t.deviations} == {0, 1, 2}
    blocks = next(g for g in t.groups if g.part == "block")
    assert blocks.layers == [0, 1, 2]  # the same slip in every layer: still alike
    assert [row.line for row in blocks.rows if row.deviation == "first"] == [line]
    text = t.render()
    assert f"<< first step that leaves the post's flow: layer 0, line {line}" in text
    assert "seen: axes (H, T, Dh) become (T, D) in one view" in text
    assert "merge: transpose(1, 2) then reshape → (B, T, D)" in text


def test_a_model_without_a_stack_of_blocks(tmp_path):
    flat = NANO.replace("self.h = nn.ModuleList([Block(cfg) for _ in range(cfg.n_layer)])", "self.h = Block(cfg)")
    flat = flat.replace("for block in self.h:\n            x = block(x)", "x = self.h(x)")
    t = trace_model(_file(tmp_path, "flat", flat) + ":GPT")
    assert [g.part for g in t.groups] == ["embed", "final", "loss"]
    assert _labels(t.groups[1]) == ["tied_head"] and "softmax" in [row.op for row in t.groups[0].rows]
    text = t.render()
    assert "── before the head (no stack of blocks found) ──" in text and "── the head ──" in text
    assert "note: no stack of blocks" in text and t.loss.shift == 0


def test_a_factory_keeps_its_sizes_and_a_model_that_needs_the_doctors_sizes_gets_them(tmp_path):
    own = (
        NANO
        + "\n\ndef tiny():\n    return GPT(GPTConfig(block_size=16, vocab_size=50, n_layer=2, n_head=4, n_embd=24))\n"
    )
    t = trace_model(_file(tmp_path, "own", own) + ":tiny")
    assert (t.sizes["V"], t.sizes["D"], t.sizes["H"]) == (50, 24, 4) and t.groups[1].layers == [0, 1]
    assert t.groups[2].rows[-1].shape == [2, 7, 50]
    # a model that needs an even number of heads: 5 fails, anatomy check's 4 builds
    gqa = NANO.replace(
        "        self.heads = cfg.n_head\n",
        "        self.heads = cfg.n_head\n        assert cfg.n_head % 2 == 0\n",
    )
    t = trace_model(_file(tmp_path, "gqa", gqa) + ":GPT")
    assert (t.sizes["D"], t.sizes["H"]) == (16, 4)
    assert t.notes[0][0].startswith("built with anatomy check's sizes (d_model=16, n_heads=4, so H and Dh are both 4)")
    assert "AssertionError" in t.notes[0][0]
    with pytest.raises(CheckError, match="AssertionError"):  # sizes asked for: no second try
        trace_model(_file(tmp_path, "gqa", gqa) + ":GPT", sizes=ModelSizes())


def test_the_convention_of_the_targets_name_is_said(tmp_path):
    labels = NANO.replace("targets", "labels")
    assert (
        "Hugging Face's convention for labels is the ids themselves"
        in trace_model(_file(tmp_path, "labels", labels) + ":GPT").render()
    )
    inside = LLAMA.replace("MASK_ARG", "mask")
    text = trace_model(_file(tmp_path, "inside", inside) + ":Transformer").render()
    assert "so targets must be the ids themselves; given targets that already hold the next tokens" in text
    assert "the pair is shifted twice" in text


def test_a_loss_that_is_not_a_cross_entropy_is_said_not_guessed(tmp_path):
    mse = NANO.replace(
        "loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))",
        "loss = (logits - F.one_hot(targets, logits.size(-1))).pow(2).mean()",
    )
    t = trace_model(_file(tmp_path, "mse", mse) + ":GPT")
    assert t.loss.found and not t.loss.read and t.loss.shift is None
    assert "the loss's pairing could not be read: at logits position 0" in t.render()
    assert "读不出损失的对齐方式：在 logits 的第 0 个位置" in t.render(lang="zh")
    plain = NANO.replace("def forward(self, idx, targets=None):", "def forward(self, idx):")
    plain = plain.replace("if targets is None:", "if True:")
    assert "没有损失：forward 不接受目标" in trace_model(_file(tmp_path, "plain", plain) + ":GPT").render(lang="zh")


def test_a_required_start_position_is_given_zero(tmp_path):
    cached = LLAMA.replace("MASK_ARG", "mask").replace(
        "def forward(self, tokens, targets=None):", "def forward(self, tokens, start_pos, targets=None):"
    )
    t = trace_model(_file(tmp_path, "cached", cached) + ":Transformer")
    assert t.call == "forward(ids, start_pos=0, targets=targets)" and t.loss.shift == 1


def test_json_and_markdown_and_sizes(tmp_path):
    path = _file(tmp_path, "nano", NANO) + ":GPT"
    t = trace_model(path, sizes=ModelSizes(vocab_size=31, d_model=24, n_heads=6, n_layers=2, batch=3, seq=5))
    d = json.loads(t.render("json"))
    assert d["schema"] == "anatomy.trace.model/1" and d["kind"] == "lm"
    assert d["sizes"]["V"] == 31 and d["loss"]["shift"] == 0
    assert [g["part"] for g in d["groups"]] == ["embed", "block", "final", "loss"]
    assert d["groups"][1]["layers"] == [0, 1] and len(d["rows"]) == sum(len(g["rows"]) for g in d["groups"])
    md = t.render("markdown")
    assert "| **blocks 0-1 (Block) × 2: alike** |" in md


def test_not_a_model_and_bad_input(tmp_path):
    path = _file(tmp_path, "nano", NANO)
    with pytest.raises(NotAModel, match="not a language model"):
        trace_model(path + ":Block")
    assert trace_if_model(path + ":Block") is None  # auto: the block trace takes over
    assert trace_if_model(path + ":SelfAttention") is None
    with pytest.raises(CheckError, match="seq=12 is longer than block_size=11"):
        trace_model(path + ":GPT", sizes=ModelSizes(seq=12))
    with pytest.raises(CheckError, match="has no 'Nope'"):
        trace_model(path + ":Nope")
    broken = NANO.replace("return logits, loss", "return logits.sum(-1), loss")
    with pytest.raises(CheckError, match=r"returned a tensor of shape \(2, 7\); a language model returns logits"):
        trace_model(_file(tmp_path, "broken", broken) + ":GPT")
    raises = NANO.replace("loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))", "loss = 1 / 0")
    with pytest.raises(
        CheckError, match=r"forward\(ids, targets=targets\) .* raised ZeroDivisionError.*`loss = 1 / 0`"
    ):
        trace_model(_file(tmp_path, "raises", raises) + ":GPT")
