import math

import torch
from torch import nn


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h, self.d_k = n_heads, d_model // n_heads
        self.proj = nn.Linear(d_model, d_model)  # q、k、v 共用一个
        self.out = nn.Linear(d_model, d_model)

    def forward(self, x, mask=None):
        b, t, d = x.shape
        q = self.proj(x).reshape(b, t, self.h, self.d_k).transpose(1, 2)  # <-- pitfall shared_qkv_projection
        k = self.proj(x).reshape(b, t, self.h, self.d_k).transpose(1, 2)
        v = self.proj(x).reshape(b, t, self.h, self.d_k).transpose(1, 2)
        s = q @ k.transpose(-2, -1) / math.sqrt(self.d_k)
        if mask is not None:
            s = s.masked_fill(~mask, float("-inf"))
        w = s.softmax(-1)
        return self.out((w @ v).transpose(1, 2).reshape(b, t, d)), w
