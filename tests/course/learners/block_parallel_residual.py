import math

import torch
from torch import nn


class TransformerBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff):
        super().__init__()
        self.h, self.d_k = n_heads, d_model // n_heads
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.o_proj = nn.Linear(d_model, d_model)

        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.ffn = nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model))

    def attention(self, x, mask):
        b, t, d = x.shape
        q = self.q_proj(x).reshape(b, t, self.h, self.d_k).transpose(1, 2)
        k = self.k_proj(x).reshape(b, t, self.h, self.d_k).transpose(1, 2)
        v = self.v_proj(x).reshape(b, t, self.h, self.d_k).transpose(1, 2)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_k)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        return self.o_proj((weights @ v).transpose(1, 2).reshape(b, t, d))

    def forward(self, x, mask=None):
        x_in = x
        x = x + self.attention(self.norm1(x), mask)
        x = x + self.ffn(self.norm2(x_in))  # <-- pitfall parallel_residual_instead
        return x
