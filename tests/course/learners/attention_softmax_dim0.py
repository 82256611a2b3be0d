import math

import torch
import torch.nn as nn


def attention(q, k, v, mask=None):
    """Scaled dot-product attention; nn.Softmax as a layer, like the old torchnlp code."""
    scores = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(mask.logical_not(), float("-inf"))
    weights = nn.Softmax(dim=0)(scores)  # <-- pitfall softmax_wrong_axis
    return torch.matmul(weights, v), weights
