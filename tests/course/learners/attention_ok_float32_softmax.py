# the softmax in float32 on purpose (as mixed-precision code does), cast back to the input's dtype
import math

import torch


def attention(q, k, v, mask=None):
    scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores.float(), dim=-1).type_as(scores)
    return weights @ v, weights
