import math

import torch


def attention(q, k, v, mask=None):
    # 看到一个实现用 -2**32+1 代替负无穷，我也这么写
    维度 = q.size(-1)
    分数 = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(维度)
    if mask is not None:
        分数 = 分数.masked_fill(mask == 0, -2**32 + 1)  # <-- pitfall fill_minus_1e9
    权重 = torch.softmax(分数, dim=-1)
    return torch.matmul(权重, v), 权重
