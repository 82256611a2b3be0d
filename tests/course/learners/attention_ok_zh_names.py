import math

import torch
import torch.nn.functional as F


def attention(q, k, v, mask=None):
    # 第一步：打分，除以根号 d_k
    维度 = q.size(-1)
    分数 = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(维度)
    # 第二步：softmax 之前加掩码
    if mask is not None:
        分数 = torch.where(mask, 分数, torch.tensor(float("-inf"), dtype=分数.dtype))
    权重 = F.softmax(分数, dim=-1)
    输出 = torch.matmul(权重, v)
    return 输出, 权重
