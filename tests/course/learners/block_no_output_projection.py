import math

import torch
from torch import nn


class TransformerBlock(nn.Module):
    """Pre-Norm block. I thought the heads' output could go straight back to the residual."""

    def __init__(self, d_model, n_heads, d_ff):
        super().__init__()
        self.n_heads = n_heads
        self.q = nn.Linear(d_model, d_model)
        self.k = nn.Linear(d_model, d_model)
        self.v = nn.Linear(d_model, d_model)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.ff = nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model))

    def forward(self, x, mask=None):
        b, t, d = x.shape
        dk = d // self.n_heads
        y = self.norm1(x)
        q = self.q(y).view(b, t, self.n_heads, dk).transpose(1, 2)
        k = self.k(y).view(b, t, self.n_heads, dk).transpose(1, 2)
        v = self.v(y).view(b, t, self.n_heads, dk).transpose(1, 2)
        s = q @ k.transpose(-2, -1) / math.sqrt(dk)
        if mask is not None:
            s = s.masked_fill(~mask, float("-inf"))
        heads = torch.softmax(s, dim=-1) @ v
        x = x + heads.transpose(1, 2).reshape(b, t, d)  # <-- pitfall no_output_projection
        return x + self.ff(self.norm2(x))
