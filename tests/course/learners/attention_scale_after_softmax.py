import math

import torch


def attention(q, k, v, mask=None):
    # step 1: similarity of every query with every key
    scores = q @ k.transpose(-2, -1)
    # step 2: hide what may not be seen
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    # step 3: normalise, then scale
    weights = torch.softmax(scores, dim=-1)
    weights = weights / math.sqrt(q.size(-1))  # <-- pitfall scale_after_softmax
    # step 4: weighted sum of the values
    return weights @ v, weights
