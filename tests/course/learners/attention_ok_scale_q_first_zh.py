import math

import torch


def attention(q, k, v, mask=None):
    # 先把 q 缩放，再做点积：数学上等价
    q = q * (q.shape[-1] ** -0.5)
    分数 = q @ k.transpose(-2, -1)
    if mask is not None:
        分数 = 分数.masked_fill(~mask, float("-inf"))
    权重 = 分数.softmax(-1)
    return 权重 @ v, 权重
