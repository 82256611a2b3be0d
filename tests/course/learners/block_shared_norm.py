import math

import torch
from torch import nn


class TransformerBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff):
        super().__init__()
        self.h, self.d_k = n_heads, d_model // n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)
        self.norm = nn.LayerNorm(d_model)
        self.fc1 = nn.Linear(d_model, d_ff)
        self.fc2 = nn.Linear(d_ff, d_model)

    def forward(self, x, mask=None):
        b, t, d = x.shape
        h = self.norm(x)  # <-- pitfall shared_layernorm (the same norm again at the FFN)
        q, k, v = self.qkv(h).split(d, dim=-1)
        q = q.view(b, t, self.h, self.d_k).transpose(1, 2)
        k = k.view(b, t, self.h, self.d_k).transpose(1, 2)
        v = v.view(b, t, self.h, self.d_k).transpose(1, 2)
        s = q @ k.transpose(-2, -1) / math.sqrt(self.d_k)
        if mask is not None:
            s = s.masked_fill(~mask, float("-inf"))
        a = (s.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.out(a)
        x = x + self.fc2(torch.nn.functional.gelu(self.fc1(self.norm(x))))
        return x
