import math

import torch
from torch import nn


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h, self.d_k = n_heads, d_model // n_heads
        self.linears = nn.ModuleList(nn.Linear(d_model, d_model) for _ in range(4))

    def forward(self, x, mask=None):
        b, t, _ = x.shape
        q, k, v = (lin(x).view(b, t, self.h, self.d_k).transpose(1, 2) for lin in self.linears[:3])
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_k)
        if mask is not None:
            scores = scores.masked_fill(mask == 0, -1e9)  # <-- pitfall fill_minus_1e9
        p = scores.softmax(dim=-1)
        return self.linears[3]((p @ v).transpose(1, 2).contiguous().view(b, t, -1))


class TransformerBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff):
        super().__init__()
        self.attn = MultiHeadAttention(d_model, n_heads)
        self.ff = nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model))
        self.ln1 = nn.LayerNorm(d_model)
        self.ln2 = nn.LayerNorm(d_model)

    def forward(self, x, mask=None):
        x = x + self.attn(self.ln1(x), mask)
        return x + self.ff(self.ln2(x))
