import math
import torch


def attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        mask = mask.unsqueeze(1).unsqueeze(1)
        scores = scores.masked_fill(mask == 0, float("-inf"))
    w = scores.softmax(-1)
    return w @ v, w  # <-- pitfall wrong_shape
