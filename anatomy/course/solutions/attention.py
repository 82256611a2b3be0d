import math

import torch


def attention(q, k, v, mask=None):
    """Scaled dot-product attention. q: (B, H, T, Dh); k, v: (B, H, S, Dh); mask: bool, True = may attend,
    broadcastable to (B, H, T, S). Returns (out (B, H, T, Dh), weights (B, H, T, S))."""
    d_k = q.size(-1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)  # (B, H, T, S)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))  # before the softmax, as the post says
    weights = torch.softmax(scores, dim=-1)  # (B, H, T, S): each row sums to 1 over the keys S
    weights = torch.nan_to_num(weights)  # a row that may attend to nothing: 0, not NaN
    return weights @ v, weights  # (B, H, T, Dh), (B, H, T, S)
