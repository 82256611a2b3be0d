import torch


def attention(q, k, v, mask=None):
    # 注意力分数（这里先不缩放）
    得分 = torch.einsum("bhqd,bhkd->bhqk", q, k)  # <-- pitfall no_scaling
    if mask is not None:
        得分 = 得分.masked_fill(~mask, float("-inf"))
    权重 = 得分.softmax(-1)
    return torch.einsum("bhqk,bhkd->bhqd", 权重, v), 权重
