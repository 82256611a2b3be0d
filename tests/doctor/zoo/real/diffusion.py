"""Diffusion U-Net attention blocks (DDPM), re-typed in our own words from the repositories named above each class,
on a sequence (B, T, C) instead of a feature map (B, C, H, W): the doctor feeds (B, T, D), and a 1x1 convolution
over a map is a per-position linear map over its flattened positions. Built as ``CLASS(d_model, n_heads)``."""

import torch
from torch import nn


# follows labmlai/annotated_deep_learning_paper_implementations labml_nn/diffusion/ddpm/unet.py (AttentionBlock)
# before its commit "fix ddpm attn" (7d1550dd, 2022): one Linear to (B, T, H, 3 Dk) chunked into q, k, v, scores
# laid out (B, T, S, H) by an einsum, the softmax taken over dim=1 (the queries), the input added back inside
# the module; a GroupNorm is built and never used. The same block lives on in pdearena's twod_unet.
class DDPMAttentionQueries(nn.Module):
    def __init__(self, channels, heads):
        super().__init__()
        self.heads, self.dk = heads, channels // heads
        self.norm = nn.GroupNorm(1, channels)  # built, never called (as published)
        self.qkv = nn.Linear(channels, 3 * channels)
        self.out = nn.Linear(channels, channels)
        self.scale = self.dk ** -0.5

    def forward(self, x):
        b = x.shape[0]
        q, k, v = self.qkv(x).view(b, -1, self.heads, 3 * self.dk).chunk(3, dim=-1)  # (B, T, H, Dk) each
        w = torch.einsum("bthd,bshd->btsh", q, k) * self.scale  # (B, T, S, H)
        w = w.softmax(dim=1)
        y = torch.einsum("btsh,bshd->bthd", w, v).reshape(b, -1, self.heads * self.dk)
        y = self.out(y)
        y += x
        return y


# the same block after the fix: the softmax over dim=2, the keys of (B, T, S, H)
class DDPMAttention(DDPMAttentionQueries):
    def forward(self, x):
        b = x.shape[0]
        q, k, v = self.qkv(x).view(b, -1, self.heads, 3 * self.dk).chunk(3, dim=-1)
        w = torch.einsum("bthd,bshd->btsh", q, k) * self.scale
        w = w.softmax(dim=2)
        y = torch.einsum("btsh,bshd->bthd", w, v).reshape(b, -1, self.heads * self.dk)
        y = self.out(y)
        y += x
        return y


# follows pesser/pytorch_diffusion pytorch_diffusion/model.py (AttnBlock, after Ho et al.'s DDPM): GroupNorm, q, k
# and v as 1x1 convolutions (here Linear over positions), one head, w = bmm(q, k) of (B, T, S) scaled by C**-0.5,
# the values summed as bmm(v, w^T), proj_out, and x + h returned from the block itself. Correct as published.
class DDPMConvAttnBlock(nn.Module):
    def __init__(self, channels, heads=1):
        super().__init__()
        self.norm = nn.GroupNorm(4, channels)
        self.q = nn.Linear(channels, channels)
        self.k = nn.Linear(channels, channels)
        self.v = nn.Linear(channels, channels)
        self.proj_out = nn.Linear(channels, channels)

    def forward(self, x):
        c = x.shape[-1]
        h = self.norm(x.transpose(1, 2)).transpose(1, 2)  # GroupNorm over the channels of (B, C, T)
        q, k, v = self.q(h), self.k(h), self.v(h)  # (B, T, C)
        w = torch.bmm(q, k.transpose(1, 2)) * c ** -0.5  # (B, T, S)
        w = torch.nn.functional.softmax(w, dim=2)
        h = torch.bmm(v.transpose(1, 2), w.transpose(1, 2)).transpose(1, 2)  # (B, T, C)
        return x + self.proj_out(h)


# injected: the same block with the weights normalised over dim=1, the queries of (B, T, S)
class DDPMConvAttnBlockQueries(DDPMConvAttnBlock):
    def forward(self, x):
        c = x.shape[-1]
        h = self.norm(x.transpose(1, 2)).transpose(1, 2)
        q, k, v = self.q(h), self.k(h), self.v(h)
        w = torch.bmm(q, k.transpose(1, 2)) * c ** -0.5
        w = torch.nn.functional.softmax(w, dim=1)
        h = torch.bmm(v.transpose(1, 2), w.transpose(1, 2)).transpose(1, 2)
        return x + self.proj_out(h)
