"""A learner's multi-head attention in the post's style: three Linears, reshape then transpose, matmul.

Written the way a reader of the post would write it, without any of `anatomy`'s code. `MultiHeadAttention` is
correct; every other class is the same module with one of the post's mistakes in its forward.
Mask: `(B, S)` key padding, True (or 1) = real token. Returns `(out, attn)`.
"""

import math

import torch
import torch.nn as nn


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        assert d_model % n_heads == 0
        self.d_model, self.h, self.d_k = d_model, n_heads, d_model // n_heads
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def forward(self, x, mask=None):
        B, T, _ = x.shape
        q = self.q_proj(x).reshape(B, T, self.h, self.d_k).transpose(1, 2)  # (B, h, T, d_k)
        k = self.k_proj(x).reshape(B, T, self.h, self.d_k).transpose(1, 2)
        v = self.v_proj(x).reshape(B, T, self.h, self.d_k).transpose(1, 2)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_k)  # (B, h, T, T)
        if mask is not None:
            scores = scores.masked_fill(mask[:, None, None, :] == 0, torch.finfo(scores.dtype).min)
        attn = torch.softmax(scores, dim=-1)
        out = (attn @ v).transpose(1, 2).reshape(B, T, self.d_model)  # (B, T, d_model)
        return self.out_proj(out), attn


class SplitWithoutTranspose(MultiHeadAttention):
    def forward(self, x, mask=None):
        B, T, _ = x.shape
        q = self.q_proj(x).reshape(B, self.h, T, self.d_k)  # "same shape", no transpose
        k = self.k_proj(x).reshape(B, self.h, T, self.d_k)
        v = self.v_proj(x).reshape(B, self.h, T, self.d_k)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_k)
        if mask is not None:
            scores = scores.masked_fill(mask[:, None, None, :] == 0, torch.finfo(scores.dtype).min)
        attn = torch.softmax(scores, dim=-1)
        out = (attn @ v).transpose(1, 2).reshape(B, T, self.d_model)
        return self.out_proj(out), attn


class MergeWrongTranspose(MultiHeadAttention):
    def forward(self, x, mask=None):
        B, T, _ = x.shape
        q = self.q_proj(x).reshape(B, T, self.h, self.d_k).transpose(1, 2)
        k = self.k_proj(x).reshape(B, T, self.h, self.d_k).transpose(1, 2)
        v = self.v_proj(x).reshape(B, T, self.h, self.d_k).transpose(1, 2)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_k)
        if mask is not None:
            scores = scores.masked_fill(mask[:, None, None, :] == 0, torch.finfo(scores.dtype).min)
        attn = torch.softmax(scores, dim=-1)
        out = (attn @ v).reshape(B, T, self.d_model)  # forgot to transpose back
        return self.out_proj(out), attn


class NoScaling(MultiHeadAttention):
    def forward(self, x, mask=None):
        B, T, _ = x.shape
        q = self.q_proj(x).reshape(B, T, self.h, self.d_k).transpose(1, 2)
        k = self.k_proj(x).reshape(B, T, self.h, self.d_k).transpose(1, 2)
        v = self.v_proj(x).reshape(B, T, self.h, self.d_k).transpose(1, 2)
        scores = q @ k.transpose(-2, -1)
        if mask is not None:
            scores = scores.masked_fill(mask[:, None, None, :] == 0, torch.finfo(scores.dtype).min)
        attn = torch.softmax(scores, dim=-1)
        out = (attn @ v).transpose(1, 2).reshape(B, T, self.d_model)
        return self.out_proj(out), attn


class ScaleByDModel(MultiHeadAttention):
    def forward(self, x, mask=None):
        B, T, _ = x.shape
        q = self.q_proj(x).reshape(B, T, self.h, self.d_k).transpose(1, 2)
        k = self.k_proj(x).reshape(B, T, self.h, self.d_k).transpose(1, 2)
        v = self.v_proj(x).reshape(B, T, self.h, self.d_k).transpose(1, 2)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_model)
        if mask is not None:
            scores = scores.masked_fill(mask[:, None, None, :] == 0, torch.finfo(scores.dtype).min)
        attn = torch.softmax(scores, dim=-1)
        out = (attn @ v).transpose(1, 2).reshape(B, T, self.d_model)
        return self.out_proj(out), attn


class MaskAfterSoftmax(MultiHeadAttention):
    def forward(self, x, mask=None):
        B, T, _ = x.shape
        q = self.q_proj(x).reshape(B, T, self.h, self.d_k).transpose(1, 2)
        k = self.k_proj(x).reshape(B, T, self.h, self.d_k).transpose(1, 2)
        v = self.v_proj(x).reshape(B, T, self.h, self.d_k).transpose(1, 2)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_k)
        attn = torch.softmax(scores, dim=-1)
        if mask is not None:
            attn = attn * mask[:, None, None, :]  # "looks the same"
        out = (attn @ v).transpose(1, 2).reshape(B, T, self.d_model)
        return self.out_proj(out), attn


class PaddingMaskOnQueries(MultiHeadAttention):
    def forward(self, x, mask=None):
        B, T, _ = x.shape
        q = self.q_proj(x).reshape(B, T, self.h, self.d_k).transpose(1, 2)
        k = self.k_proj(x).reshape(B, T, self.h, self.d_k).transpose(1, 2)
        v = self.v_proj(x).reshape(B, T, self.h, self.d_k).transpose(1, 2)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_k)
        if mask is not None:
            scores = scores.masked_fill(mask.unsqueeze(1).unsqueeze(-1) == 0, torch.finfo(scores.dtype).min)
        attn = torch.softmax(scores, dim=-1)
        out = (attn @ v).transpose(1, 2).reshape(B, T, self.d_model)
        return self.out_proj(out), attn


class InfFillNoGuard(MultiHeadAttention):
    def forward(self, x, mask=None):
        B, T, _ = x.shape
        q = self.q_proj(x).reshape(B, T, self.h, self.d_k).transpose(1, 2)
        k = self.k_proj(x).reshape(B, T, self.h, self.d_k).transpose(1, 2)
        v = self.v_proj(x).reshape(B, T, self.h, self.d_k).transpose(1, 2)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_k)
        if mask is not None:
            scores = scores.masked_fill(mask[:, None, None, :] == 0, float("-inf"))
        attn = torch.softmax(scores, dim=-1)
        out = (attn @ v).transpose(1, 2).reshape(B, T, self.d_model)
        return self.out_proj(out), attn


class FiniteFill(MultiHeadAttention):
    def forward(self, x, mask=None):
        B, T, _ = x.shape
        q = self.q_proj(x).reshape(B, T, self.h, self.d_k).transpose(1, 2)
        k = self.k_proj(x).reshape(B, T, self.h, self.d_k).transpose(1, 2)
        v = self.v_proj(x).reshape(B, T, self.h, self.d_k).transpose(1, 2)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_k)
        if mask is not None:
            scores = scores.masked_fill(mask[:, None, None, :] == 0, -1e9)
        attn = torch.softmax(scores, dim=-1)
        out = (attn @ v).transpose(1, 2).reshape(B, T, self.d_model)
        return self.out_proj(out), attn


class CausalSelfAttention(MultiHeadAttention):
    """A decoder's self-attention: it builds its causal mask itself (check with --causal)."""

    def forward(self, x, mask=None):
        B, T, _ = x.shape
        q = self.q_proj(x).reshape(B, T, self.h, self.d_k).transpose(1, 2)
        k = self.k_proj(x).reshape(B, T, self.h, self.d_k).transpose(1, 2)
        v = self.v_proj(x).reshape(B, T, self.h, self.d_k).transpose(1, 2)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_k)
        keep = torch.tril(torch.ones(T, T, dtype=torch.bool, device=x.device))
        if mask is not None:
            keep = keep & (mask[:, None, None, :] != 0)
        scores = scores.masked_fill(~keep, torch.finfo(scores.dtype).min)
        attn = torch.softmax(scores, dim=-1)
        out = (attn @ v).transpose(1, 2).reshape(B, T, self.d_model)
        return self.out_proj(out), attn


class CausalOffByOne(MultiHeadAttention):
    def forward(self, x, mask=None):
        B, T, _ = x.shape
        q = self.q_proj(x).reshape(B, T, self.h, self.d_k).transpose(1, 2)
        k = self.k_proj(x).reshape(B, T, self.h, self.d_k).transpose(1, 2)
        v = self.v_proj(x).reshape(B, T, self.h, self.d_k).transpose(1, 2)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_k)
        keep = torch.tril(torch.ones(T, T, dtype=torch.bool, device=x.device), diagonal=1)  # should be 0
        if mask is not None:
            keep = keep & (mask[:, None, None, :] != 0)
        scores = scores.masked_fill(~keep, torch.finfo(scores.dtype).min)
        attn = torch.softmax(scores, dim=-1)
        out = (attn @ v).transpose(1, 2).reshape(B, T, self.d_model)
        return self.out_proj(out), attn
