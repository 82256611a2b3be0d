import math
import torch
from torch import nn


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h = n_heads
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)  # <-- pitfall unused_parameter
        self.out_proj = nn.Linear(d_model, d_model)

    def forward(self, x, mask=None):
        b, t, d = x.shape
        q = self.q_proj(x).view(b, t, self.h, -1).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.h, -1).transpose(1, 2)
        v = self.q_proj(x).view(b, t, self.h, -1).transpose(1, 2)
        s = q @ k.transpose(-2, -1) / math.sqrt(d // self.h)
        if mask is not None:
            s = s.masked_fill(~mask, float("-inf"))
        w = s.softmax(-1)
        return self.out_proj((w @ v).transpose(1, 2).reshape(b, t, d)), w
