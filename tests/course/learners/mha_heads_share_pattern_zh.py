import math

import torch
from torch import nn


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.头数 = n_heads
        self.维度 = d_model // n_heads
        self.wq = nn.Linear(d_model, d_model)
        self.wk = nn.Linear(d_model, d_model)
        self.wv = nn.Linear(d_model, d_model)
        self.wo = nn.Linear(d_model, d_model)

    def forward(self, x, mask=None):
        b, t, d = x.shape
        q, k = self.wq(x), self.wk(x)
        v = self.wv(x).view(b, t, self.头数, self.维度).transpose(1, 2)
        # 先算一次注意力分数，所有头共用
        分数 = q @ k.transpose(-2, -1) / math.sqrt(self.维度)
        if mask is not None:
            分数 = 分数.masked_fill(~mask[:, 0], float("-inf"))
        权重 = torch.softmax(分数, dim=-1).unsqueeze(1)  # <-- pitfall heads_share_one_pattern
        输出 = (权重 @ v).transpose(1, 2).reshape(b, t, d)
        return self.wo(输出), 权重.expand(b, self.头数, t, t)
