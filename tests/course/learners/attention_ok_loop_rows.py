import math

import torch


def attention(q, k, v, mask=None):
    """A careful student's version: one query row at a time, to see what happens."""
    b, h, t, d = q.shape
    out = torch.zeros_like(q)
    weights = torch.zeros(b, h, t, k.shape[2], dtype=q.dtype)
    for i in range(t):
        row = (q[:, :, i : i + 1] @ k.transpose(-2, -1)).squeeze(2) / math.sqrt(d)  # (B, H, S)
        if mask is not None:
            keep = mask[..., i, :] if mask.shape[-2] > 1 else mask[..., 0, :]
            row = row.masked_fill(~keep, float("-inf"))
        w = torch.softmax(row, dim=-1)
        weights[:, :, i] = w
        out[:, :, i] = (w.unsqueeze(-1) * v).sum(-2)
    return out, weights
