import math

import torch
from torch import nn


class TransformerBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff):
        super().__init__()
        self.h = n_heads
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.o_proj = nn.Linear(d_model, d_model)
        self.bn1 = nn.BatchNorm1d(d_model)
        self.bn2 = nn.BatchNorm1d(d_model)
        self.ffn = nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model))

    def norm(self, bn, x):
        return bn(x.transpose(1, 2)).transpose(1, 2)  # <-- pitfall batchnorm_instead_of_layernorm

    def forward(self, x, mask=None):
        b, t, d = x.shape
        y = self.norm(self.bn1, x)
        q, k, v = (p(y).view(b, t, self.h, -1).transpose(1, 2) for p in (self.q_proj, self.k_proj, self.v_proj))
        s = q @ k.transpose(-2, -1) / math.sqrt(d // self.h)
        if mask is not None:
            s = s.masked_fill(~mask, float("-inf"))
        x = x + self.o_proj((s.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d))
        return x + self.ffn(self.norm(self.bn2, x))
