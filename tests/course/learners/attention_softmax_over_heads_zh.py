# 照着书上的 CausalAttention 改成 4 维输入
import math

import torch


def attention(q, k, v, mask=None):
    d_k = q.size(-1)
    注意力分数 = q @ k.transpose(-2, -1) / math.sqrt(d_k)
    if mask is not None:
        注意力分数 = 注意力分数.masked_fill(~mask, float("-inf"))
    注意力权重 = torch.softmax(注意力分数, dim=1)  # <-- pitfall softmax_wrong_axis
    return 注意力权重 @ v, 注意力权重
