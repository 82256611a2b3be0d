"""Research-repository styles: a fused `to_qkv` with `to_out = nn.Sequential(Linear, Dropout)` and einsum,
bare nn.Parameter q/k/v next to a Linear output projection, nn.MultiheadAttention with one more Linear after it,
a GPT-2 style fused `c_attn` / `c_proj` decoder with a `bias` buffer. Built as CLASS(d_model, n_heads).
"""

import math

import torch
import torch.nn.functional as F
from torch import einsum, nn


class Attention(nn.Module):
    def __init__(self, dim, heads=8, dim_head=None, dropout=0.0, scale=None):
        super().__init__()
        dim_head = dim_head or dim // heads
        inner_dim = dim_head * heads
        self.heads = heads
        self.scale = dim_head ** -0.5 if scale is None else scale
        self.to_qkv = nn.Linear(dim, inner_dim * 3, bias=False)
        self.to_out = nn.Sequential(nn.Linear(inner_dim, dim), nn.Dropout(dropout))

    def forward(self, x, mask=None):
        b, n, _ = x.shape
        h = self.heads
        q, k, v = self.to_qkv(x).chunk(3, dim=-1)
        q, k, v = (t.reshape(b, n, h, -1).transpose(1, 2) for t in (q, k, v))  # b h n d
        sim = einsum('b h i d, b h j d -> b h i j', q, k) * self.scale
        if mask is not None:
            mask = mask[:, None, None, :]  # b j -> b 1 1 j
            sim = sim.masked_fill(~mask, -torch.finfo(sim.dtype).max)
        attn = sim.softmax(dim=-1)
        out = einsum('b h i j, b h j d -> b h i d', attn, v)
        out = out.transpose(1, 2).reshape(b, n, -1)  # b n (h d)
        return self.to_out(out)


class AttentionScaledByDim(Attention):
    def __init__(self, dim, heads=8):
        super().__init__(dim, heads, scale=dim ** -0.5)


class EinsumQKV(nn.Module):
    """q/k/v are bare (D, H, Dh) Parameters used with einsum; the output projection is an nn.Linear"""

    def __init__(self, d_model, n_heads, scale_by_d_model=False):
        super().__init__()
        d_head = d_model // n_heads
        self.W_Q = nn.Parameter(torch.randn(d_model, n_heads, d_head) / math.sqrt(d_model))
        self.W_K = nn.Parameter(torch.randn(d_model, n_heads, d_head) / math.sqrt(d_model))
        self.W_V = nn.Parameter(torch.randn(d_model, n_heads, d_head) / math.sqrt(d_model))
        self.out = nn.Linear(d_model, d_model)
        self.scale = 1 / math.sqrt(d_model if scale_by_d_model else d_head)

    def forward(self, x):
        q = torch.einsum('btd,dhe->bhte', x, self.W_Q)
        k = torch.einsum('btd,dhe->bhte', x, self.W_K)
        v = torch.einsum('btd,dhe->bhte', x, self.W_V)
        scores = torch.einsum('bhte,bhse->bhts', q, k) * self.scale
        w = scores.softmax(-1)
        z = torch.einsum('bhts,bhse->bthe', w, v)
        return self.out(z.flatten(2))


class EinsumQKVScaledByDModel(EinsumQKV):
    def __init__(self, d_model, n_heads):
        super().__init__(d_model, n_heads, scale_by_d_model=True)


class TorchMHAThenLinear(nn.Module):
    """nn.MultiheadAttention and one more Linear after it"""

    def __init__(self, d_model, n_heads):
        super().__init__()
        self.mha = nn.MultiheadAttention(d_model, n_heads, batch_first=True)
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x, key_padding_mask=None):
        out, _ = self.mha(x, x, x, key_padding_mask=key_padding_mask, need_weights=False)
        return self.proj(out)


class CausalSelfAttention(nn.Module):
    """GPT-2 style: fused c_attn, c_proj, a lower-triangular `bias` buffer"""

    def __init__(self, n_embd, n_head, block_size=32, offset=0):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.n_head, self.n_embd = n_head, n_embd
        self.register_buffer("bias", torch.tril(torch.ones(block_size, block_size), diagonal=offset)
                             .view(1, 1, block_size, block_size))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float('-inf'))
        att = F.softmax(att, dim=-1)
        y = att @ v  # (B, nh, T, T) x (B, nh, T, hs) -> (B, nh, T, hs)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class LocalWindowEncoder(CausalSelfAttention):
    """an encoder whose attention sees only the neighbours i-1, i, i+1 (not causal, not the post's attention)"""

    def __init__(self, n_embd, n_head, block_size=32):
        super().__init__(n_embd, n_head, block_size)
        i = torch.arange(block_size)
        band = ((i[:, None] - i[None, :]).abs() <= 1).float()
        self.register_buffer("bias", band.view(1, 1, block_size, block_size))
