import math

import torch


def attention(q, k, v, mask=None):
    scores = q @ k.mT / math.sqrt(q.size(-1))
    if mask is not None:
        bias = torch.zeros(mask.shape, dtype=scores.dtype).masked_fill(~mask, float("-inf"))
        scores = scores + bias
    p = torch.softmax(scores, -1)
    return p @ v, p
