"""A learner's Transformer block in the 2017 paper's style: Post-Norm, nn.LayerNorm, a ReLU FFN.

Written without any of `anatomy`'s code. `PostNormBlock` and `PreNormBlock` are correct; the others carry one of
the post's §4–§5 mistakes. The attention uses w_q/w_k/w_v/w_o with reshape + transpose.
Mask: `(B, S)`, 1 = real token. Returns the block's output only.
"""

import math

import torch
import torch.nn as nn


class SelfAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h, self.d_k = n_heads, d_model // n_heads
        self.w_q = nn.Linear(d_model, d_model)
        self.w_k = nn.Linear(d_model, d_model)
        self.w_v = nn.Linear(d_model, d_model)
        self.w_o = nn.Linear(d_model, d_model)

    def forward(self, x, mask=None):
        B, T, D = x.shape
        q = self.w_q(x).view(B, T, self.h, self.d_k).transpose(1, 2)
        k = self.w_k(x).view(B, T, self.h, self.d_k).transpose(1, 2)
        v = self.w_v(x).view(B, T, self.h, self.d_k).transpose(1, 2)
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(self.d_k)
        if mask is not None:
            scores = scores.masked_fill(mask[:, None, None, :] == 0, -1e4)
        p = torch.softmax(scores, dim=-1)
        return self.w_o(torch.matmul(p, v).transpose(1, 2).contiguous().view(B, T, D))


class PostNormBlock(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.attn = SelfAttention(d_model, n_heads)
        self.norm1 = nn.LayerNorm(d_model)
        self.ff = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.ReLU(), nn.Linear(4 * d_model, d_model))
        self.norm2 = nn.LayerNorm(d_model)

    def forward(self, x, mask=None):
        x = self.norm1(x + self.attn(x, mask))
        return self.norm2(x + self.ff(x))


class PreNormBlock(PostNormBlock):
    def forward(self, x, mask=None):
        x = x + self.attn(self.norm1(x), mask)
        return x + self.ff(self.norm2(x))


class SharedLayerNorm(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.attn = SelfAttention(d_model, n_heads)
        self.norm = nn.LayerNorm(d_model)  # "one is enough"
        self.ff = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.ReLU(), nn.Linear(4 * d_model, d_model))

    def forward(self, x, mask=None):
        x = self.norm(x + self.attn(x, mask))
        return self.norm(x + self.ff(x))


class NoResidual(PostNormBlock):
    def forward(self, x, mask=None):
        x = self.norm1(self.attn(x, mask))
        return self.norm2(self.ff(x))


class NormOnResidualPath(PostNormBlock):
    """Post-Norm turned into Pre-Norm with the branch lines pulled wrong (the post's §5.2)."""

    def forward(self, x, mask=None):
        x = self.norm1(x)
        x = x + self.attn(x, mask)
        x = self.norm2(x)
        return x + self.ff(x)


class NarrowFFN(PostNormBlock):
    def __init__(self, d_model, n_heads):
        super().__init__(d_model, n_heads)
        self.ff = nn.Sequential(nn.Linear(d_model, d_model // 2), nn.ReLU(), nn.Linear(d_model // 2, d_model))
