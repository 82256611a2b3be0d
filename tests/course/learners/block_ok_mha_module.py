# reuse the MultiHeadAttention of exercise 04, returning (out, weights)
import math

import torch
from torch import nn


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h, self.d_k = n_heads, d_model // n_heads
        self.w_q, self.w_k = nn.Linear(d_model, d_model), nn.Linear(d_model, d_model)
        self.w_v, self.w_o = nn.Linear(d_model, d_model), nn.Linear(d_model, d_model)

    def forward(self, x, mask=None):
        b, t, d = x.shape
        q, k, v = (w(x).view(b, t, self.h, self.d_k).transpose(1, 2) for w in (self.w_q, self.w_k, self.w_v))
        s = q @ k.transpose(-2, -1) / math.sqrt(self.d_k)
        if mask is not None:
            s = s.masked_fill(~mask, torch.finfo(s.dtype).min)
        a = torch.softmax(s, dim=-1)
        return self.w_o((a @ v).transpose(1, 2).reshape(b, t, d)), a


class TransformerBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff):
        super().__init__()
        self.attn = MultiHeadAttention(d_model, n_heads)
        self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(approximate="none"), nn.Linear(d_ff, d_model))

    def forward(self, x, mask=None):
        res = x
        x = self.ln1(x)
        x, _ = self.attn(x, mask)
        x = res + x
        res = x
        return res + self.mlp(self.ln2(x))
