import torch


def attention(q, k, v, mask=None):
    dk = q.size(-1)
    scores = torch.matmul(q, k.transpose(-1, -2)) / dk  # <-- pitfall scale_not_sqrt
    if mask is not None:
        scores = scores.masked_fill(mask.logical_not(), float("-inf"))
    p = torch.softmax(scores, dim=-1)
    return torch.matmul(p, v), p
