import math
import torch
import torch.nn.functional as F


def attention(q, k, v, mask=None):
    # fastNLP-style DotAttention, written for 3-d tensors and given 4-d ones
    attn = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(q.size(-1))
    if mask is not None:
        attn = attn.masked_fill(~mask, -float("inf"))
    attn = F.softmax(attn, dim=2)  # <-- pitfall softmax_over_queries
    return torch.matmul(attn, v), attn
