# 中文教程风格：多头注意力（这里故意漏掉了 transpose，形状不报错但头被"串味"）
import math

import torch
from torch import nn


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, h):
        super().__init__()
        self.h = h
        self.d_k = d_model // h
        self.W_q = nn.Linear(d_model, d_model)
        self.W_k = nn.Linear(d_model, d_model)
        self.W_v = nn.Linear(d_model, d_model)
        self.W_o = nn.Linear(d_model, d_model)

    def forward(self, x, mask=None):
        b, t, _ = x.size()
        # 线性投影
        q = self.W_q(x).view(b, t, self.h, self.d_k)   # 拆头：忘了 transpose(1, 2)
        k = self.W_k(x).view(b, t, self.h, self.d_k)
        v = self.W_v(x).view(b, t, self.h, self.d_k)
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(self.d_k)
        if mask is not None:
            scores = scores.masked_fill(mask == 0, -1e9)
        attn = torch.softmax(scores, dim=-1)
        out = torch.matmul(attn, v)
        out = out.contiguous().view(b, t, self.h * self.d_k)  # 并头
        return self.W_o(out), attn
