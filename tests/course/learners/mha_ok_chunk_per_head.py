import math
import torch
from torch import nn


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h, self.dh = n_heads, d_model // n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.o = nn.Linear(d_model, d_model)

    def forward(self, x, mask=None):
        b, t, d = x.shape
        qkv = self.qkv(x).view(b, t, self.h, 3 * self.dh).transpose(1, 2)
        q, k, v = qkv.chunk(3, dim=-1)
        s = q @ k.transpose(-2, -1) / math.sqrt(self.dh)
        if mask is not None:
            s = s.masked_fill(mask.logical_not(), float("-inf"))
        w = s.softmax(-1)
        return self.o((w @ v).transpose(1, 2).reshape(b, t, d)), w
