import math

import torch
from torch import nn


class TransformerBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff):
        super().__init__()
        self.头数 = n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.投影 = nn.Linear(d_model, d_model)
        self.归一化1 = nn.LayerNorm(d_model)
        self.归一化2 = nn.LayerNorm(d_model)
        self.前馈 = nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model))

    def 注意力(self, x, mask):
        b, t, d = x.shape
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q, k, v = (张量.view(b, t, self.头数, -1).transpose(1, 2) for 张量 in (q, k, v))
        权重 = torch.softmax(q @ k.transpose(-2, -1) if mask is None else (q @ k.transpose(-2, -1)).masked_fill(~mask, float("-inf")), dim=-1)
        权重 = 权重 / math.sqrt(d // self.头数)  # <-- pitfall scale_after_softmax
        return self.投影((权重 @ v).transpose(1, 2).reshape(b, t, d))

    def forward(self, x, mask=None):
        x = x + self.注意力(self.归一化1(x), mask)
        return x + self.前馈(self.归一化2(x))
