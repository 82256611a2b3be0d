import math

import torch
from torch import nn


class TransformerBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff):
        super().__init__()
        self.头数 = n_heads
        self.wq = nn.Linear(d_model, d_model)
        self.wk = nn.Linear(d_model, d_model)
        self.wv = nn.Linear(d_model, d_model)
        self.wo = nn.Linear(d_model, d_model)
        self.ln1 = nn.LayerNorm(d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.ffn = nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model))

    def forward(self, x, mask=None):
        b, t, d = x.shape
        h = self.ln1(x)
        q = self.wq(h).view(b, t, self.头数, -1).transpose(1, 2)
        k = self.wk(x).view(b, t, self.头数, -1).transpose(1, 2)  # <-- pitfall norm_on_query_only
        v = self.wv(x).view(b, t, self.头数, -1).transpose(1, 2)
        s = q @ k.transpose(-2, -1) / math.sqrt(d // self.头数)
        if mask is not None:
            s = s.masked_fill(~mask, float("-inf"))
        x = x + self.wo((s.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d))
        return x + self.ffn(self.ln2(x))
