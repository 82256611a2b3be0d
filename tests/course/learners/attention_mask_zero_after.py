import math
import torch


def attention(q, k, v, mask=None):
    w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)), dim=-1)
    if mask is not None:
        w = w * mask  # <-- pitfall mask_after_softmax
    return w @ v, w
