import math
import torch


def attention(q, k, v, mask=None):
    scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(k.size(-2))  # <-- pitfall scale_from_wrong_size
    if mask is not None:
        scores = torch.where(mask, scores, torch.tensor(float("-inf")))
    w = torch.softmax(scores, -1)
    return torch.matmul(w, v), w
