import math
import torch
import torch.nn.functional as F


def attention(q, k, v, mask=None):
    e = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        zero_vec = -9e15 * torch.ones_like(e)  # <-- pitfall fill_minus_1e9
        e = torch.where(mask, e, zero_vec)
    a = F.softmax(e, dim=-1)
    return a @ v, a
