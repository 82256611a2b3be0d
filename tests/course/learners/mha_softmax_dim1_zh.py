import math

import torch
from torch import nn


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.头数 = n_heads
        self.头维 = d_model // n_heads
        self.q层 = nn.Linear(d_model, d_model)
        self.k层 = nn.Linear(d_model, d_model)
        self.v层 = nn.Linear(d_model, d_model)
        self.输出层 = nn.Linear(d_model, d_model)

    def forward(self, x, mask=None):
        b, t, d = x.shape
        q = self.q层(x).view(b, t, self.头数, self.头维).transpose(1, 2)
        k = self.k层(x).view(b, t, self.头数, self.头维).transpose(1, 2)
        v = self.v层(x).view(b, t, self.头数, self.头维).transpose(1, 2)
        分数 = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(self.头维)
        if mask is not None:
            分数 = 分数.masked_fill(mask == 0, float("-inf"))
        权重 = torch.softmax(分数, dim=1)  # <-- pitfall softmax_wrong_axis
        输出 = torch.matmul(权重, v).transpose(1, 2).reshape(b, t, d)
        return self.输出层(输出), 权重
