# a mask read as nn.MultiheadAttention's (True = hidden): under a causal mask each position sees the future
import math

import torch
from torch import nn


class TransformerBlock(nn.Module):
    """The post's §5.3 block, Pre-Norm: x + MHA(LN(x)), then x + FFN(LN(x)); each LayerNorm its own."""

    def __init__(self, d_model, n_heads, d_ff):
        super().__init__()
        self.h, self.d_k = n_heads, d_model // n_heads
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.o_proj = nn.Linear(d_model, d_model)
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.up, self.down = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)

    def attention(self, x, mask):
        b, t, d = x.shape
        q = self.q_proj(x).reshape(b, t, self.h, self.d_k).transpose(1, 2)  # (B, H, T, Dh)
        k = self.k_proj(x).reshape(b, t, self.h, self.d_k).transpose(1, 2)  # (B, H, S, Dh)
        v = self.v_proj(x).reshape(b, t, self.h, self.d_k).transpose(1, 2)  # (B, H, S, Dh)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_k)  # (B, H, T, S)
        if mask is not None:
            scores = scores.masked_fill(mask, float("-inf"))  # <-- pitfall mask_inverted
        weights = torch.nan_to_num(torch.softmax(scores, dim=-1))  # (B, H, T, S)
        out = (weights @ v).transpose(1, 2).reshape(b, t, d)  # (B, T, D)
        return self.o_proj(out)

    def forward(self, x, mask=None):
        """x: (B, T, D); mask: bool, True = may attend, broadcastable to (B, H, T, S)."""
        x = x + self.attention(self.norm1(x), mask)  # sub-layer 1: Pre-Norm, residual Add
        x = x + self.down(torch.nn.functional.gelu(self.up(self.norm2(x))))  # sub-layer 2: FFN
        return x
