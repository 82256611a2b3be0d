import math

import torch
import torch.nn.functional as F
from torch import nn


class TransformerBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, 丢弃率=0.1):
        super().__init__()
        self.头数 = n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.o = nn.Linear(d_model, d_model)
        self.n1, self.n2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.up, self.down = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)
        self.丢弃率 = 丢弃率

    def forward(self, x, mask=None):
        b, t, d = x.shape
        q, k, v = self.qkv(self.n1(x)).chunk(3, -1)
        q, k, v = (z.reshape(b, t, self.头数, -1).transpose(1, 2) for z in (q, k, v))
        s = q @ k.transpose(-2, -1) / math.sqrt(d // self.头数)
        if mask is not None:
            s = s.masked_fill(~mask, float("-inf"))
        w = F.dropout(s.softmax(-1), self.丢弃率, training=self.training)
        x = x + F.dropout(self.o((w @ v).transpose(1, 2).reshape(b, t, d)), self.丢弃率, self.training)
        return x + F.dropout(self.down(F.gelu(self.up(self.n2(x)))), self.丢弃率, self.training)
