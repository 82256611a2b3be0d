import math

import torch


def attention(q, k, v, mask=None):
    # 缩放点积
    s = torch.einsum("bhtd,bhsd->bhts", q, k) / math.sqrt(q.shape[-1])
    if mask is not None:
        s = s.masked_fill(~mask, -1e9)
    a = torch.softmax(s, dim=2)  # <-- pitfall softmax_over_queries
    return torch.einsum("bhts,bhsd->bhtd", a, v), a
