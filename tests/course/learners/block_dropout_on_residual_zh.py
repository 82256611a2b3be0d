import math

import torch
from torch import nn


class TransformerBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.h = n_heads
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.o_proj = nn.Linear(d_model, d_model)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.ffn = nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model))
        self.dropout = nn.Dropout(dropout)

    def 自注意力(self, x, mask):
        b, t, d = x.shape
        q, k, v = (p(x).view(b, t, self.h, -1).transpose(1, 2) for p in (self.q_proj, self.k_proj, self.v_proj))
        分数 = q @ k.transpose(-2, -1) / math.sqrt(d // self.h)
        if mask is not None:
            分数 = 分数.masked_fill(~mask, float("-inf"))
        return self.o_proj((分数.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d))

    def forward(self, x, mask=None):
        残差 = self.dropout(x)  # <-- pitfall dropout_on_residual
        x = 残差 + self.自注意力(self.norm1(x), mask)
        x = x + self.dropout(self.ffn(self.norm2(x)))
        return x
