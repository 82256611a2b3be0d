import math

import torch
from torch import nn


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        assert d_model % n_heads == 0
        self.h, self.d_k = n_heads, d_model // n_heads
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.o_proj = nn.Linear(d_model, d_model)

    def forward(self, x, mask=None):
        """x: (B, T, D); mask: bool, True = may attend, broadcastable to (B, H, T, S)."""
        b, t, d = x.shape
        q = self.q_proj(x).reshape(b, t, self.h, self.d_k).transpose(1, 2)  # (B, H, T, Dh)
        k = self.k_proj(x).reshape(b, t, self.h, self.d_k).transpose(1, 2)  # (B, H, S, Dh)
        v = self.v_proj(x).reshape(b, t, self.h, self.d_k).transpose(1, 2)  # (B, H, S, Dh)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_k)  # (B, H, T, S)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = torch.nan_to_num(torch.softmax(scores, dim=-1))  # (B, H, T, S)
        out = (weights @ v).transpose(1, 2).reshape(b, t, d)  # (B, H, T, Dh) -> (B, T, H, Dh) -> (B, T, D)
        return self.o_proj(out), weights
