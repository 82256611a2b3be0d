import math

import torch
from torch import nn


class TransformerBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff):
        super().__init__()
        self.h = n_heads
        self.q = nn.Linear(d_model, d_model)
        self.k = nn.Linear(d_model, d_model)
        self.v = nn.Linear(d_model, d_model)
        self.o = nn.Linear(d_model, d_model)
        self.n1, self.n2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model))

    def forward(self, x, mask=None):
        b, t, d = x.shape
        y = self.n1(x)
        q, k, v = (f(y).reshape(b, t, self.h, -1).transpose(1, 2) for f in (self.q, self.k, self.v))
        s = torch.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(d // self.h)
        if mask is not None:
            s = s.masked_fill(~mask, float("-inf"))
        a = torch.softmax(s, dim=2)  # <-- pitfall softmax_over_queries
        x = x + self.o(torch.einsum("bhqk,bhkd->bhqd", a, v).transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.n2(x))
