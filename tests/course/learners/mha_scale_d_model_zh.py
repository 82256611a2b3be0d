import math

import torch
from torch import nn


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.d_model, self.头数 = d_model, n_heads
        self.q = nn.Linear(d_model, d_model)
        self.k = nn.Linear(d_model, d_model)
        self.v = nn.Linear(d_model, d_model)
        self.o = nn.Linear(d_model, d_model)

    def forward(self, x, mask=None):
        b, t, d = x.shape
        q, k, v = (f(x).view(b, t, self.头数, -1).transpose(1, 2) for f in (self.q, self.k, self.v))
        分数 = q @ k.transpose(-2, -1) / math.sqrt(self.d_model)  # <-- pitfall scale_by_d_model
        if mask is not None:
            分数 = 分数.masked_fill(~mask, float("-inf"))
        权重 = 分数.softmax(-1)
        return self.o((权重 @ v).transpose(1, 2).reshape(b, t, d)), 权重
