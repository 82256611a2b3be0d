import torch


def attention(q, k, v, mask=None):
    q, k = q.float(), k.float()
    scores = q @ k.transpose(-2, -1)  # <-- pitfall no_scaling
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    w = scores.softmax(-1).to(v.dtype)
    return w @ v, w
