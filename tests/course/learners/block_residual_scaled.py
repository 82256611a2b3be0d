import math

import torch
from torch import nn


class TransformerBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff):
        super().__init__()
        self.h = n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.ff = nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model))

    def forward(self, x, mask=None):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, -1)
        q, k, v = (z.view(b, t, self.h, -1).transpose(1, 2) for z in (q, k, v))
        s = q @ k.transpose(-2, -1) / math.sqrt(d // self.h)
        if mask is not None:
            s = s.masked_fill(~mask, float("-inf"))
        a = self.proj((s.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d))
        x = x + a
        x = (x + self.ff(self.ln2(x))) / math.sqrt(2)  # <-- pitfall unexplained
        return x
