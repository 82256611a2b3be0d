# Re-typed after karpathy/nanochat nanochat/gpt.py (the GPT of nanochat): a GPTConfig dataclass with n_kv_head,
# untied wte / lm_head, a parameter-free RMS norm (F.rms_norm, no gain) before each sub-layer and at the end, rotary
# positions from cos/sin buffers, QK-norm followed by a constant gain on q and k (1.2 each: the scores are scaled by
# 1.44/sqrt(head_dim), a chosen temperature), attention through F.scaled_dot_product_attention(is_causal=True) with
# grouped kv heads, a squared-ReLU MLP, and forward(idx, targets=None) returning the loss or the logits.
#   GPT   correct (a design, not a bug: with |q| and |k| fixed by the norm the scale is a knob, not a lost sqrt(d_k)).
#   GPTGainNoNorm   injected: the same gains with the QK-norm deleted (a wrong scale on raw q and k).
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

GAIN = 1.2


@dataclass
class GPTConfig:
    sequence_len: int = 64
    vocab_size: int = 128
    n_layer: int = 2
    n_head: int = 4
    n_kv_head: int = 2
    n_embd: int = 32


def rms(x):
    return F.rms_norm(x, (x.size(-1),))


def rotate(x, cos, sin):
    half = x.shape[-1] // 2
    a, b = x[..., :half], x[..., half:]
    return torch.cat([a * cos + b * sin, b * cos - a * sin], dim=-1)


class Attention(nn.Module):
    norm_qk = True

    def __init__(self, cfg):
        super().__init__()
        self.n_head, self.n_kv_head = cfg.n_head, cfg.n_kv_head
        self.head_dim = cfg.n_embd // cfg.n_head
        self.c_q = nn.Linear(cfg.n_embd, cfg.n_head * self.head_dim, bias=False)
        self.c_k = nn.Linear(cfg.n_embd, cfg.n_kv_head * self.head_dim, bias=False)
        self.c_v = nn.Linear(cfg.n_embd, cfg.n_kv_head * self.head_dim, bias=False)
        self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=False)

    def forward(self, x, cos, sin):
        B, T, C = x.shape
        q = self.c_q(x).view(B, T, self.n_head, self.head_dim)
        k = self.c_k(x).view(B, T, self.n_kv_head, self.head_dim)
        v = self.c_v(x).view(B, T, self.n_kv_head, self.head_dim)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        if self.norm_qk:
            q, k = rms(q), rms(k)
        q, k = q * GAIN, k * GAIN
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        return self.c_proj(y.transpose(1, 2).reshape(B, T, C))


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.c_fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd, bias=False)
        self.c_proj = nn.Linear(4 * cfg.n_embd, cfg.n_embd, bias=False)

    def forward(self, x):
        return self.c_proj(F.relu(self.c_fc(x)).square())


class Block(nn.Module):
    attention = Attention

    def __init__(self, cfg):
        super().__init__()
        self.attn = self.attention(cfg)
        self.mlp = MLP(cfg)

    def forward(self, x, cos, sin):
        x = x + self.attn(rms(x), cos, sin)
        return x + self.mlp(rms(x))


class GPT(nn.Module):
    block = Block

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.transformer = nn.ModuleDict(
            {"wte": nn.Embedding(config.vocab_size, config.n_embd),
             "h": nn.ModuleList([self.block(config) for _ in range(config.n_layer)])}
        )
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        dim = config.n_embd // config.n_head
        inv = 1.0 / (10000 ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
        ang = torch.outer(torch.arange(config.sequence_len * 4, dtype=torch.float32), inv)
        self.register_buffer("cos", ang.cos()[None, :, None, :], persistent=False)
        self.register_buffer("sin", ang.sin()[None, :, None, :], persistent=False)

    def forward(self, idx, targets=None):
        T = idx.size(1)
        cos, sin = self.cos[:, :T], self.sin[:, :T]
        x = rms(self.transformer.wte(idx))
        for blk in self.transformer.h:
            x = blk(x, cos, sin)
        logits = self.lm_head(rms(x)).float()
        if targets is None:
            return logits
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)


class AttentionNoNorm(Attention):
    norm_qk = False


class BlockNoNorm(Block):
    attention = AttentionNoNorm


class GPTGainNoNorm(GPT):
    block = BlockNoNorm
