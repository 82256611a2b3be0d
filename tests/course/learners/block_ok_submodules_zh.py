import math

import torch
from torch import nn


class 多头注意力(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.头数 = n_heads
        self.wq = nn.Linear(d_model, d_model)
        self.wk = nn.Linear(d_model, d_model)
        self.wv = nn.Linear(d_model, d_model)
        self.wo = nn.Linear(d_model, d_model)

    def forward(self, x, mask=None):
        b, t, d = x.shape
        拆 = lambda z: z.view(b, t, self.头数, d // self.头数).transpose(1, 2)  # noqa: E731
        q, k, v = 拆(self.wq(x)), 拆(self.wk(x)), 拆(self.wv(x))
        分数 = q @ k.transpose(-2, -1) / math.sqrt(d // self.头数)
        if mask is not None:
            分数 = 分数.masked_fill(~mask, float("-inf"))
        return self.wo((分数.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d))


class 前馈网络(nn.Module):
    def __init__(self, d_model, d_ff):
        super().__init__()
        self.升维 = nn.Linear(d_model, d_ff)
        self.降维 = nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self.降维(nn.functional.gelu(self.升维(x)))


class TransformerBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff):
        super().__init__()
        self.注意力 = 多头注意力(d_model, n_heads)
        self.前馈 = 前馈网络(d_model, d_ff)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)

    def forward(self, x, mask=None):
        x = x + self.注意力(self.norm1(x), mask)
        x = x + self.前馈(self.norm2(x))
        return x
