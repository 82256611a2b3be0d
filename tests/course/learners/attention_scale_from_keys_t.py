import math
import torch


def attention(q, k, v, mask=None):
    k_t = k.transpose(-2, -1)  # (B, H, Dh, S)
    scores = q @ k_t / math.sqrt(k_t.size(-1))  # <-- pitfall scale_from_wrong_size
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    w = scores.softmax(dim=-1)
    return w @ v, w
