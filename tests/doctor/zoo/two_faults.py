"""Two of the post's mistakes in one module: no single fault of the bug zoo reproduces them, a pair does.

Written without any of `anatomy`'s code. `NoScalingMaskAfterSoftmax` (the classic pair: scores not divided by
sqrt(d_k), and the padding mask multiplied into the weights after softmax), `SplitCausalOffByOne` (a decoder's
self-attention, check with --causal: heads split without transpose, and a causal mask that lets each token see the
next one) and `SharedNormNoScaling` (a Post-Norm block with one LayerNorm for both sub-layers, whose attention
forgets the scaling). Masks: `(B, S)`, True (or 1) = real token.
"""

import torch
import torch.nn as nn


class NoScalingMaskAfterSoftmax(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h, self.d_k = n_heads, d_model // n_heads
        self.q_proj, self.k_proj = nn.Linear(d_model, d_model), nn.Linear(d_model, d_model)
        self.v_proj, self.out_proj = nn.Linear(d_model, d_model), nn.Linear(d_model, d_model)

    def forward(self, x, mask=None):
        B, T, D = x.shape
        q = self.q_proj(x).view(B, T, self.h, self.d_k).transpose(1, 2)  # (B, h, T, d_k)
        k = self.k_proj(x).view(B, T, self.h, self.d_k).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.h, self.d_k).transpose(1, 2)
        attn = torch.softmax(q @ k.transpose(-2, -1), dim=-1)  # mistake 1: no / sqrt(d_k)
        if mask is not None:
            attn = attn * mask[:, None, None, :]  # mistake 2: masked after softmax, rows no longer sum to 1
        return self.out_proj((attn @ v).transpose(1, 2).reshape(B, T, D)), attn


class SplitCausalOffByOne(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads, self.head_dim = n_heads, d_model // n_heads
        self.qkv, self.proj = nn.Linear(d_model, 3 * d_model), nn.Linear(d_model, d_model)

    def forward(self, x):
        B, T, D = x.shape
        q, k, v = (t.reshape(B, self.n_heads, T, self.head_dim) for t in self.qkv(x).chunk(3, -1))  # mistake 1
        scores = torch.einsum("bhtd,bhsd->bhts", q, k) * self.head_dim**-0.5
        future = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(2)  # mistake 2: triu(1) was meant
        weights = scores.masked_fill(future, float("-inf")).softmax(-1)
        return self.proj(torch.einsum("bhts,bhsd->bthd", weights, v).reshape(B, T, D))


class SharedNormNoScaling(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h, self.d_k = n_heads, d_model // n_heads
        self.w_q, self.w_k = nn.Linear(d_model, d_model), nn.Linear(d_model, d_model)
        self.w_v, self.w_o = nn.Linear(d_model, d_model), nn.Linear(d_model, d_model)
        self.norm = nn.LayerNorm(d_model)  # mistake 1: one norm for both sub-layers
        self.ff = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.ReLU(), nn.Linear(4 * d_model, d_model))

    def attention(self, x, mask):
        B, T, D = x.shape
        q, k, v = (f(x).view(B, T, self.h, self.d_k).transpose(1, 2) for f in (self.w_q, self.w_k, self.w_v))
        scores = q @ k.transpose(-2, -1)  # mistake 2: no / sqrt(d_k)
        if mask is not None:
            scores = scores.masked_fill(mask[:, None, None, :] == 0, torch.finfo(scores.dtype).min)
        return self.w_o((scores.softmax(-1) @ v).transpose(1, 2).reshape(B, T, D))

    def forward(self, x, mask=None):
        x = self.norm(x + self.attention(x, mask))
        return self.norm(x + self.ff(x))
