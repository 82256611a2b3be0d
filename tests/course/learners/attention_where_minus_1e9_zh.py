import math

import torch


def attention(q, k, v, mask=None):
    分数 = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        分数 = torch.where(mask, 分数, torch.full_like(分数, -1e9))  # <-- pitfall fill_minus_1e9
    权重 = torch.softmax(分数, dim=-1)
    return 权重 @ v, 权重
