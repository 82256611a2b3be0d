import math

import torch
from torch import nn


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h, self.d_k = n_heads, d_model // n_heads
        self.q_lin = nn.Linear(d_model, d_model)
        self.k_lin = nn.Linear(d_model, d_model)
        self.v_lin = nn.Linear(d_model, d_model)
        self.out_lin = nn.Linear(d_model, d_model)

    def forward(self, x, mask=None):
        b, t, d = x.shape
        q = self.q_lin(x).view(b, t, self.h, self.d_k).transpose(1, 2)
        k = self.k_lin(x).view(b, t, self.h, self.d_k).transpose(1, 2)
        v = self.v_lin(x).view(b, t, self.h, self.d_k).transpose(1, 2)
        分数 = q @ k.transpose(-2, -1) / math.sqrt(self.d_k)
        权重 = torch.softmax(分数, dim=-1)
        if mask is not None:
            权重 = 权重.masked_fill(~mask, 0.0)  # <-- pitfall mask_after_softmax
        return self.out_lin((权重 @ v).transpose(1, 2).reshape(b, t, d)), 权重
