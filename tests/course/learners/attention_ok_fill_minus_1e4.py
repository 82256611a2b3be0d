# Hugging Face style: a large finite fill that float16 can hold
import math

import torch


def attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, -1e4)
    w = scores.softmax(-1)
    return w @ v, w
