import math

import torch
from torch import nn


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.头数 = n_heads
        self.每头 = d_model // n_heads
        self.查询 = nn.Linear(d_model, d_model)
        self.键 = nn.Linear(d_model, d_model)
        self.值 = nn.Linear(d_model, d_model)
        self.输出 = nn.Linear(d_model, d_model)

    def forward(self, x, mask=None):
        q, k, v = self.查询(x), self.键(x), self.值(x)
        结果, 权重们 = [], []
        for h in range(self.头数):  # 逐头计算
            片 = slice(h * self.每头, (h + 1) * self.每头)
            分数 = q[..., 片] @ k[..., 片].transpose(-2, -1) / math.sqrt(self.每头)
            if mask is not None:
                分数 = 分数.masked_fill(~mask[:, 0], float("-inf"))
            权重 = torch.softmax(分数, dim=-1)
            结果.append(权重 @ v[..., 片])
            权重们.append(权重)
        return self.输出(torch.cat(结果, dim=-1)), torch.stack(权重们, dim=1)
