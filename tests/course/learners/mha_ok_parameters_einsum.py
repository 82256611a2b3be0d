import math

import torch
from torch import nn


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h, self.dk = n_heads, d_model // n_heads
        self.W_q = nn.Parameter(torch.randn(d_model, n_heads, self.dk) / math.sqrt(d_model))
        self.W_k = nn.Parameter(torch.randn(d_model, n_heads, self.dk) / math.sqrt(d_model))
        self.W_v = nn.Parameter(torch.randn(d_model, n_heads, self.dk) / math.sqrt(d_model))
        self.W_o = nn.Parameter(torch.randn(n_heads, self.dk, d_model) / math.sqrt(d_model))

    def forward(self, x, mask=None):
        q = torch.einsum("btd,dhk->bhtk", x, self.W_q)
        k = torch.einsum("bsd,dhk->bhsk", x, self.W_k)
        v = torch.einsum("bsd,dhk->bhsk", x, self.W_v)
        scores = torch.einsum("bhtk,bhsk->bhts", q, k) / math.sqrt(self.dk)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        w = scores.softmax(-1)
        out = torch.einsum("bhts,bhsk->bhtk", w, v)
        return torch.einsum("bhtk,hkd->btd", out, self.W_o), w
