import math

import torch


def attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1)
    scores = scores / q.size(-1)  # <-- pitfall scale_not_sqrt
    if mask is not None:
        scores = scores.masked_fill(~mask, -math.inf)
    w = scores.softmax(-1)
    return w @ v, w
