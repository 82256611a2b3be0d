import math

import torch


def attention(q, k, v, mask=None):
    scores = torch.einsum("bhtd,bhsd->bhts", q, k) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    weights = scores.softmax(dim=-1)
    return torch.einsum("bhts,bhsd->bhtd", weights, v), weights
