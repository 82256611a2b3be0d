import math
import torch


def attention(q, k, v, mask=None):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    w = torch.log_softmax(s, dim=-1)  # <-- pitfall unexplained
    return w @ v, w
