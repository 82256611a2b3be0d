import math

import torch
import torch.nn.functional as F


def attention(q, k, v, mask=None):
    # 注意：masked_fill_ 是原地操作
    注意力 = torch.matmul(q, k.transpose(-1, -2))
    注意力 = 注意力 / math.sqrt(q.shape[-1])
    if mask is not None:
        注意力.masked_fill_(mask.logical_not(), float("-inf"))
    权重 = F.softmax(注意力, dim=-1)
    return torch.matmul(权重, v), 权重
