import math

import torch
import torch.nn.functional as F


def attention(q, k, v, mask=None):
    scores = torch.einsum("bhtd,bhsd->bhts", q, k) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    p = F.softmax(scores, dim=-1)
    p = F.dropout(p, 0.1)  # <-- pitfall dropout_at_eval
    return torch.einsum("bhts,bhsd->bhtd", p, v), p
