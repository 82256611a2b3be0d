import math

import torch


def attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        # True 表示要遮住
        scores = scores.masked_fill(mask, float("-inf"))  # <-- pitfall mask_inverted
    w = torch.softmax(scores, dim=-1)
    return w @ v, w
