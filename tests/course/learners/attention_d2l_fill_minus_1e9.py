# d2l-style: a DotProductAttention written as a function, with a valid-lens style mask turned into booleans
import math
import torch
import torch.nn.functional as F


def attention(queries, keys, values, mask=None):
    d = queries.shape[-1]
    # 注意力分数
    scores = torch.matmul(queries, keys.transpose(2, 3)) / math.sqrt(d)
    if mask is not None:
        scores = scores.masked_fill(mask == False, -1e9)  # noqa: E712  (a learner's way of writing ~mask)  # <-- pitfall fill_minus_1e9
    attn = F.softmax(scores, dim=-1)
    return torch.matmul(attn, values), attn
