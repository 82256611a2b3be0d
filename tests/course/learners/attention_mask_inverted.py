import math

import torch


def attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))  # <-- pitfall mask_inverted
    weights = torch.nan_to_num(torch.softmax(scores, dim=-1))
    return weights @ v, weights
