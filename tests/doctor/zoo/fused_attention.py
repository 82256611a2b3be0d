"""A learner's attention in the compact style: one fused qkv Linear and einsum.

Written without any of `anatomy`'s code. `FusedAttention` is correct; every other class has one of the post's
mistakes. Mask: `key_padding_mask (B, S)`, True = padding (torch.nn's sense). Returns `out` only (no weights).
"""

import torch
import torch.nn as nn


class FusedAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads, self.head_dim = n_heads, d_model // n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x, key_padding_mask=None):
        B, T, D = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.n_heads, self.head_dim).unbind(dim=2)  # (B, T, H, Dh) each
        scores = torch.einsum("bthd,bshd->bhts", q, k) * self.head_dim**-0.5
        if key_padding_mask is not None:
            scores = scores.masked_fill(key_padding_mask[:, None, None, :], torch.finfo(scores.dtype).min)
        weights = scores.softmax(-1)
        out = torch.einsum("bhts,bshd->bthd", weights, v).reshape(B, T, D)
        return self.proj(out)


class SplitWithoutTranspose(FusedAttention):
    def forward(self, x, key_padding_mask=None):
        B, T, D = x.shape
        q, k, v = (t.reshape(B, self.n_heads, T, self.head_dim) for t in self.qkv(x).chunk(3, dim=-1))
        scores = torch.einsum("bhtd,bhsd->bhts", q, k) * self.head_dim**-0.5
        if key_padding_mask is not None:
            scores = scores.masked_fill(key_padding_mask[:, None, None, :], torch.finfo(scores.dtype).min)
        weights = scores.softmax(-1)
        out = torch.einsum("bhts,bhsd->bthd", weights, v).reshape(B, T, D)
        return self.proj(out)


class MergeWrongTranspose(FusedAttention):
    def forward(self, x, key_padding_mask=None):
        B, T, D = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.n_heads, self.head_dim).permute(2, 0, 3, 1, 4)  # (B, H, T, Dh)
        scores = torch.einsum("bhtd,bhsd->bhts", q, k) * self.head_dim**-0.5
        if key_padding_mask is not None:
            scores = scores.masked_fill(key_padding_mask[:, None, None, :], torch.finfo(scores.dtype).min)
        weights = scores.softmax(-1)
        out = torch.einsum("bhts,bhsd->bhtd", weights, v).reshape(B, T, D)  # (B, H, T, Dh) read as (B, T, D)
        return self.proj(out)


class NoScaling(FusedAttention):
    def forward(self, x, key_padding_mask=None):
        B, T, D = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.n_heads, self.head_dim).unbind(dim=2)
        scores = torch.einsum("bthd,bshd->bhts", q, k)
        if key_padding_mask is not None:
            scores = scores.masked_fill(key_padding_mask[:, None, None, :], torch.finfo(scores.dtype).min)
        weights = scores.softmax(-1)
        out = torch.einsum("bhts,bshd->bthd", weights, v).reshape(B, T, D)
        return self.proj(out)


class ScaleByDModel(FusedAttention):
    def forward(self, x, key_padding_mask=None):
        B, T, D = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.n_heads, self.head_dim).unbind(dim=2)
        scores = torch.einsum("bthd,bshd->bhts", q, k) / D**0.5
        if key_padding_mask is not None:
            scores = scores.masked_fill(key_padding_mask[:, None, None, :], torch.finfo(scores.dtype).min)
        weights = scores.softmax(-1)
        out = torch.einsum("bhts,bshd->bthd", weights, v).reshape(B, T, D)
        return self.proj(out)


class MaskAfterSoftmax(FusedAttention):
    def forward(self, x, key_padding_mask=None):
        B, T, D = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.n_heads, self.head_dim).unbind(dim=2)
        scores = torch.einsum("bthd,bshd->bhts", q, k) * self.head_dim**-0.5
        weights = scores.softmax(-1)
        if key_padding_mask is not None:
            weights = weights.masked_fill(key_padding_mask[:, None, None, :], 0.0)
        out = torch.einsum("bhts,bshd->bthd", weights, v).reshape(B, T, D)
        return self.proj(out)


class PaddingMaskOnQueries(FusedAttention):
    def forward(self, x, key_padding_mask=None):
        B, T, D = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.n_heads, self.head_dim).unbind(dim=2)
        scores = torch.einsum("bthd,bshd->bhts", q, k) * self.head_dim**-0.5
        if key_padding_mask is not None:
            scores = scores.masked_fill(key_padding_mask[:, None, :, None], torch.finfo(scores.dtype).min)
        weights = scores.softmax(-1)
        out = torch.einsum("bhts,bshd->bthd", weights, v).reshape(B, T, D)
        return self.proj(out)


class InfFillNoGuard(FusedAttention):
    def forward(self, x, key_padding_mask=None):
        B, T, D = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.n_heads, self.head_dim).unbind(dim=2)
        scores = torch.einsum("bthd,bshd->bhts", q, k) * self.head_dim**-0.5
        if key_padding_mask is not None:
            scores = scores.masked_fill(key_padding_mask[:, None, None, :], float("-inf"))
        weights = scores.softmax(-1)
        out = torch.einsum("bhts,bshd->bthd", weights, v).reshape(B, T, D)
        return self.proj(out)


class CausalAttention(FusedAttention):
    """Decoder self-attention that hides the future itself (check with --causal)."""

    def forward(self, x, key_padding_mask=None):
        B, T, D = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.n_heads, self.head_dim).unbind(dim=2)
        scores = torch.einsum("bthd,bshd->bhts", q, k) * self.head_dim**-0.5
        hide = torch.triu(torch.ones(T, T, dtype=torch.bool, device=x.device), diagonal=1)
        if key_padding_mask is not None:
            hide = hide | key_padding_mask[:, None, None, :]
        weights = scores.masked_fill(hide, torch.finfo(scores.dtype).min).softmax(-1)
        out = torch.einsum("bhts,bshd->bthd", weights, v).reshape(B, T, D)
        return self.proj(out)


class CausalOffByOne(FusedAttention):
    def forward(self, x, key_padding_mask=None):
        B, T, D = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.n_heads, self.head_dim).unbind(dim=2)
        scores = torch.einsum("bthd,bshd->bhts", q, k) * self.head_dim**-0.5
        hide = torch.triu(torch.ones(T, T, dtype=torch.bool, device=x.device), diagonal=2)  # should be 1
        if key_padding_mask is not None:
            hide = hide | key_padding_mask[:, None, None, :]
        weights = scores.masked_fill(hide, torch.finfo(scores.dtype).min).softmax(-1)
        out = torch.einsum("bhts,bshd->bthd", weights, v).reshape(B, T, D)
        return self.proj(out)
