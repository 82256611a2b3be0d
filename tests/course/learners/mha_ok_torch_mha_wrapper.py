import torch
from torch import nn


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.inner = nn.MultiheadAttention(d_model, n_heads, batch_first=True)

    def forward(self, x, mask=None):
        blocked = None if mask is None else ~mask.expand(x.shape[0], -1, -1, -1)[:, 0]
        if blocked is not None:
            blocked = blocked.repeat_interleave(self.inner.num_heads, dim=0)
        out, w = self.inner(x, x, x, attn_mask=blocked, average_attn_weights=False)
        return out, w
