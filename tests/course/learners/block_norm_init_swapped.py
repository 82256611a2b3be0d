import math

import torch
from torch import nn


class LayerNorm(nn.Module):
    def __init__(self, d, eps=1e-5):
        super().__init__()
        self.gamma = nn.Parameter(torch.zeros(d))  # <-- pitfall norm_init_swapped
        self.beta = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        var = x.var(-1, keepdim=True, unbiased=False)
        return self.gamma * (x - mean) / torch.sqrt(var + self.eps) + self.beta


class TransformerBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff):
        super().__init__()
        self.h = n_heads
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.o_proj = nn.Linear(d_model, d_model)
        self.norm1 = LayerNorm(d_model)
        self.norm2 = LayerNorm(d_model)
        self.ffn = nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model))

    def forward(self, x, mask=None):
        b, t, d = x.shape
        dh = d // self.h
        y = self.norm1(x)
        q, k, v = (p(y).reshape(b, t, self.h, dh).transpose(1, 2) for p in (self.q_proj, self.k_proj, self.v_proj))
        s = q @ k.transpose(-2, -1) / math.sqrt(dh)
        if mask is not None:
            s = s.masked_fill(~mask, float("-inf"))
        a = torch.softmax(s, -1) @ v
        x = x + self.o_proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.ffn(self.norm2(x))
