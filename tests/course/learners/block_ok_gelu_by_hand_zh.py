import math

import torch
from torch import nn


def 高斯误差激活(x):
    # GELU 的 tanh 近似，照论文手写
    return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


class TransformerBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff):
        super().__init__()
        self.头数, self.每头 = n_heads, d_model // n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.输出 = nn.Linear(d_model, d_model)
        self.归一1, self.归一2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.升维, self.降维 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)

    def forward(self, x, mask=None):
        b, t, d = x.shape
        q, k, v = self.qkv(self.归一1(x)).reshape(b, t, 3, self.头数, self.每头).permute(2, 0, 3, 1, 4)
        分数 = q @ k.transpose(-2, -1) / math.sqrt(self.每头)
        if mask is not None:
            分数 = 分数.masked_fill(~mask, float("-inf"))
        x = x + self.输出((分数.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d))
        return x + self.降维(高斯误差激活(self.升维(self.归一2(x))))
