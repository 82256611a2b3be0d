import math

import torch
from torch import nn


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h, self.d_k = n_heads, d_model // n_heads
        self.q = nn.Linear(d_model, d_model)
        self.k = nn.Linear(d_model, d_model)
        self.v = nn.Linear(d_model, d_model)
        self.o = nn.Linear(d_model, d_model)  # <-- pitfall output_projection_unused

    def forward(self, x, mask=None):
        b, t, d = x.shape
        q = self.q(x).reshape(b, t, self.h, self.d_k).transpose(1, 2)
        k = self.k(x).reshape(b, t, self.h, self.d_k).transpose(1, 2)
        v = self.v(x).reshape(b, t, self.h, self.d_k).transpose(1, 2)
        s = q @ k.transpose(-2, -1) / math.sqrt(self.d_k)
        if mask is not None:
            s = s.masked_fill(~mask, float("-inf"))
        w = s.softmax(-1)
        return (w @ v).transpose(1, 2).reshape(b, t, d), w
