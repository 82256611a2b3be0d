import math

import torch
from torch import nn


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.头数 = n_heads
        self.wq = nn.Linear(d_model, d_model)
        self.wk = nn.Linear(d_model, d_model)
        self.wv = nn.Linear(d_model, d_model)

    def forward(self, x, mask=None):
        b, t, d = x.shape
        dh = d // self.头数
        q = self.wq(x).view(b, t, self.头数, dh).transpose(1, 2)
        k = self.wk(x).view(b, t, self.头数, dh).transpose(1, 2)
        v = self.wv(x).view(b, t, self.头数, dh).transpose(1, 2)
        分数 = q @ k.transpose(-2, -1) / math.sqrt(dh)
        if mask is not None:
            分数 = 分数.masked_fill(~mask, float("-inf"))
        权重 = 分数.softmax(-1)
        return (权重 @ v).transpose(1, 2).reshape(b, t, d), 权重  # <-- pitfall no_output_projection
