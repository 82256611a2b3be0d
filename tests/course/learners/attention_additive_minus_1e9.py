import math

import torch


def attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores + (1.0 - mask.to(scores.dtype)) * -1e9  # <-- pitfall fill_minus_1e9
    w = torch.softmax(scores, dim=-1)
    return w @ v, w
