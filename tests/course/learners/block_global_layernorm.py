import math

import torch
from torch import nn

LN = {}  # 按维度缓存 LayerNorm，省得每次都建


def layer_norm(d):
    if d not in LN:
        LN[d] = nn.LayerNorm(d)
    return LN[d]


class TransformerBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff):
        super().__init__()
        self.h, self.d_k = n_heads, d_model // n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.o = nn.Linear(d_model, d_model)
        self.ff = nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model))

    def forward(self, x, mask=None):
        b, t, d = x.shape
        h = layer_norm(d)(x)  # <-- pitfall shared_layernorm
        q, k, v = self.qkv(h).chunk(3, dim=-1)
        q, k, v = (z.view(b, t, self.h, self.d_k).transpose(1, 2) for z in (q, k, v))
        s = q @ k.transpose(-2, -1) / math.sqrt(self.d_k)
        if mask is not None:
            s = s.masked_fill(~mask, float("-inf"))
        x = x + self.o((s.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d))
        return x + self.ff(layer_norm(d)(x))
