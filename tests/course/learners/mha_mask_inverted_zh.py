import math

import torch
from torch import nn


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h, self.d_k = n_heads, d_model // n_heads
        self.线性q = nn.Linear(d_model, d_model)
        self.线性k = nn.Linear(d_model, d_model)
        self.线性v = nn.Linear(d_model, d_model)
        self.线性o = nn.Linear(d_model, d_model)

    def forward(self, x, mask=None):
        b, t, d = x.shape
        q = self.线性q(x).view(b, t, self.h, self.d_k).transpose(1, 2)
        k = self.线性k(x).view(b, t, self.h, self.d_k).transpose(1, 2)
        v = self.线性v(x).view(b, t, self.h, self.d_k).transpose(1, 2)
        分数 = q @ k.transpose(-2, -1) / math.sqrt(self.d_k)
        if mask is not None:
            分数 = 分数.masked_fill(mask, float("-inf"))  # <-- pitfall mask_inverted
        权重 = torch.nan_to_num(torch.softmax(分数, dim=-1))
        return self.线性o((权重 @ v).transpose(1, 2).reshape(b, t, d)), 权重
