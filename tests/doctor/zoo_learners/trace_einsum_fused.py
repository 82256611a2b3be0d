"""Textbook style: one fused q|k|v Parameter and an einsum, bare Parameters, output in an nn.Sequential."""
import torch
from torch import nn


class FusedAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.scale = (dim // heads) ** -0.5
        self.w_qkv = nn.Parameter(torch.randn(dim, 3 * dim) / dim ** 0.5)
        self.to_out = nn.Sequential(nn.Linear(dim, dim), nn.Dropout(0.0))

    def forward(self, x):
        n, t, c = x.shape
        qkv = torch.einsum("btc,cf->btf", x, self.w_qkv)
        q, k, v = qkv.chunk(3, dim=-1)
        q, k, v = (z.reshape(n, t, self.heads, c // self.heads).permute(0, 2, 1, 3) for z in (q, k, v))
        dots = torch.einsum("bhid,bhjd->bhij", q, k) * self.scale
        attn = dots.softmax(dim=-1)
        out = torch.einsum("bhij,bhjd->bhid", attn, v)
        out = out.permute(0, 2, 1, 3).reshape(n, t, c)
        return self.to_out(out)
