import math

import torch
import torch.nn.functional as F
from torch import nn


class TransformerBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff):
        super().__init__()
        self.h, self.dk = n_heads, d_model // n_heads
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(d_model, d_model) for _ in range(4))
        self.n1, self.n2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.up, self.down = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)

    def forward(self, x, mask=None):
        b, t, d = x.shape
        h = self.n1(x)
        q, k, v = (w(h).view(b, t, self.h, self.dk).transpose(1, 2) for w in (self.wq, self.wk, self.wv))
        s = q @ k.transpose(-2, -1) / math.sqrt(self.dk)
        if mask is not None:
            s = s.masked_fill(~mask, float("-inf"))
        x = x + self.wo((s.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d))
        return x + self.down(F.silu(self.up(self.n2(x))))  # <-- pitfall activation_not_gelu
