import math

import torch
import torch.nn.functional as F
from torch import nn

PAD = 0

class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads = n_heads
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.o_proj = nn.Linear(d_model, d_model)

    def forward(self, x, mask=None):
        b, t, d = x.shape
        dh = d // self.n_heads
        q = self.q_proj(x).reshape(b, t, self.n_heads, dh).transpose(1, 2)
        k = self.k_proj(x).reshape(b, t, self.n_heads, dh).transpose(1, 2)
        v = self.v_proj(x).reshape(b, t, self.n_heads, dh).transpose(1, 2)
        scores = q @ k.transpose(-2, -1) / math.sqrt(dh)
        if mask is not None:
            scores = scores.masked_fill(mask == 0, float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        out = (weights @ v).transpose(1, 2).reshape(b, t, d)
        return self.o_proj(out), weights


class TransformerBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff):
        super().__init__()
        self.attn = MultiHeadAttention(d_model, n_heads)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.ffn = nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model))

    def forward(self, x, mask=None):
        attn_out, _ = self.attn(self.norm1(x), mask)
        x = x + attn_out
        x = x + self.ffn(self.norm2(x))
        return x


class GPT(nn.Module):
    def __init__(self, vocab_size, d_model, n_heads, n_layers, block_size):
        super().__init__()
        self.tok = nn.Embedding(vocab_size, d_model)
        self.pos = nn.Embedding(block_size, d_model)
        self.blocks = nn.ModuleList([TransformerBlock(d_model, n_heads, 4 * d_model) for _ in range(n_layers)])
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size, bias=False)
        self.head.weight = self.tok.weight

    def forward(self, ids, targets=None):
        t = ids.size(1)
        p = self.pos(torch.arange(t))
        x = self.tok(ids) + p
        mask = torch.ones(t, t).tril().bool()
        for block in self.blocks:
            x = block(x + p, mask)  # <-- pitfall positions_added_twice
        logits = self.head(self.norm(x))
        if targets is None:
            return logits, None
        return logits, F.cross_entropy(logits[:, :-1].flatten(0, 1), targets[:, 1:].flatten(), ignore_index=PAD)
