# 前馈网络：我以为隐藏层和 d_model 一样宽就行
import math

import torch
from torch import nn


class TransformerBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff):
        super().__init__()
        self.头数 = n_heads
        self.每头维度 = d_model // n_heads
        self.查询 = nn.Linear(d_model, d_model)
        self.键 = nn.Linear(d_model, d_model)
        self.值 = nn.Linear(d_model, d_model)
        self.输出 = nn.Linear(d_model, d_model)
        self.归一化1 = nn.LayerNorm(d_model)
        self.归一化2 = nn.LayerNorm(d_model)
        self.前馈 = nn.Sequential(nn.Linear(d_model, d_model), nn.GELU(), nn.Linear(d_model, d_model))  # <-- pitfall ffn_ignores_d_ff

    def 注意力(self, x, mask):
        b, t, d = x.shape
        q = self.查询(x).reshape(b, t, self.头数, self.每头维度).transpose(1, 2)
        k = self.键(x).reshape(b, t, self.头数, self.每头维度).transpose(1, 2)
        v = self.值(x).reshape(b, t, self.头数, self.每头维度).transpose(1, 2)
        分数 = q @ k.transpose(-2, -1) / math.sqrt(self.每头维度)
        if mask is not None:
            分数 = 分数.masked_fill(~mask, float("-inf"))
        权重 = 分数.softmax(dim=-1)
        return self.输出((权重 @ v).transpose(1, 2).reshape(b, t, d))

    def forward(self, x, mask=None):
        x = x + self.注意力(self.归一化1(x), mask)
        x = x + self.前馈(self.归一化2(x))
        return x
