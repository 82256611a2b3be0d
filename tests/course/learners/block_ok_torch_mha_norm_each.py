# nn.MultiheadAttention fed the same normalised x three times (the norm called for each of q, k, v)
import torch
from torch import nn


class TransformerBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff):
        super().__init__()
        self.h = n_heads
        self.ln1 = nn.LayerNorm(d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.mha = nn.MultiheadAttention(d_model, n_heads, batch_first=True)
        self.fc1, self.fc2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)

    def forward(self, x, mask=None):
        b, t, _ = x.shape
        hidden = None if mask is None else ~mask.expand(b, self.h, t, t).reshape(b * self.h, t, t)  # True = hidden
        a, _ = self.mha(self.ln1(x), self.ln1(x), self.ln1(x), attn_mask=hidden)
        x = x + a
        return x + self.fc2(nn.functional.gelu(self.fc1(self.ln2(x))))
