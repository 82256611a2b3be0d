import math

import torch
import torch.nn.functional as F


def attention(q, k, v, mask=None, dropout_p=0.0, training=False):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    w = F.softmax(scores, dim=-1)
    w = F.dropout(w, dropout_p, training=training)
    return w @ v, w
