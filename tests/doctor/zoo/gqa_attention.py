"""A learner's grouped-query attention (Llama's layout): q_proj D → D, k_proj and v_proj D → Hkv·Dh, o_proj D → D.

Written without any of `anatomy`'s code. The doctor builds `CLASS(d_model, n_heads)`, so the number of key/value
heads is each class's default. `GroupedQueryAttention` (2 key/value heads), `MultiQueryAttention` (1) and
`TiledGroups` (`k.repeat` instead of `repeat_interleave`: the same model with its query heads in another order) are
correct; the other classes carry one of the post's mistakes, or (`TiledResidualInside`) one the bug zoo does not
know. Mask: `(B, S)`, True = real token. Returns
`(out, weights (B, H, T, S))`.
"""

import math

import torch
import torch.nn as nn


class GroupedQueryAttention(nn.Module):
    def __init__(self, d_model, n_heads, n_kv_heads=2):
        super().__init__()
        assert d_model % n_heads == 0 and n_heads % n_kv_heads == 0
        self.h, self.h_kv, self.d_k = n_heads, n_kv_heads, d_model // n_heads
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, n_kv_heads * self.d_k)
        self.v_proj = nn.Linear(d_model, n_kv_heads * self.d_k)
        self.o_proj = nn.Linear(d_model, d_model)

    def heads(self, x):
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.h, self.d_k).transpose(1, 2)  # (B, H, T, d_k)
        k = self.k_proj(x).view(B, T, self.h_kv, self.d_k).transpose(1, 2)  # (B, H_kv, T, d_k)
        v = self.v_proj(x).view(B, T, self.h_kv, self.d_k).transpose(1, 2)
        return q, k, v

    def share(self, kv):
        return kv.repeat_interleave(self.h // self.h_kv, dim=1)  # (B, H, T, d_k): heads 0,1 share kv head 0 ...

    def attend(self, q, k, v, mask, scale):
        B, _, T, _ = q.shape
        scores = q @ self.share(k).transpose(-2, -1) * scale  # (B, H, T, T)
        if mask is not None:
            scores = scores.masked_fill(~mask[:, None, None, :].bool(), torch.finfo(scores.dtype).min)
        attn = scores.softmax(-1)
        out = (attn @ self.share(v)).transpose(1, 2).reshape(B, T, self.h * self.d_k)
        return self.o_proj(out), attn

    def forward(self, x, mask=None):
        q, k, v = self.heads(x)
        return self.attend(q, k, v, mask, 1 / math.sqrt(self.d_k))


class MultiQueryAttention(GroupedQueryAttention):
    def __init__(self, d_model, n_heads):
        super().__init__(d_model, n_heads, n_kv_heads=1)


class TiledGroups(GroupedQueryAttention):
    def share(self, kv):
        return kv.repeat(1, self.h // self.h_kv, 1, 1)  # heads 0,2 share kv head 0 ...


class TiledResidualInside(TiledGroups):
    """A mistake the zoo does not know: the attention adds its own input back (the block will add it again)."""

    def forward(self, x, mask=None):
        out, attn = super().forward(x, mask)
        return x + out, attn


class NoScaling(GroupedQueryAttention):
    def forward(self, x, mask=None):
        q, k, v = self.heads(x)
        return self.attend(q, k, v, mask, 1.0)


class SplitWithoutTranspose(GroupedQueryAttention):
    def heads(self, x):
        B, T, _ = x.shape
        q = self.q_proj(x).reshape(B, self.h, T, self.d_k)  # "the same shape", no transpose
        k = self.k_proj(x).reshape(B, self.h_kv, T, self.d_k)
        v = self.v_proj(x).reshape(B, self.h_kv, T, self.d_k)
        return q, k, v


class FusedGQA(nn.Module):
    """One fused Linear D → D + 2·Hkv·Dh, rows q | k | v (as our own `fused_qkv`); returns out only."""

    def __init__(self, d_model, n_heads, n_kv_heads=2):
        super().__init__()
        self.h, self.h_kv, self.d_k = n_heads, n_kv_heads, d_model // n_heads
        self.wqkv = nn.Linear(d_model, d_model + 2 * n_kv_heads * self.d_k, bias=False)
        self.wo = nn.Linear(d_model, d_model, bias=False)

    def forward(self, x, mask=None):
        B, T, D = x.shape
        q, k, v = self.wqkv(x).split([D, self.h_kv * self.d_k, self.h_kv * self.d_k], dim=-1)
        q = q.view(B, T, self.h, self.d_k)
        k = k.view(B, T, self.h_kv, self.d_k).repeat_interleave(self.h // self.h_kv, dim=2)
        v = v.view(B, T, self.h_kv, self.d_k).repeat_interleave(self.h // self.h_kv, dim=2)
        scores = torch.einsum("bthd,bshd->bhts", q, k) / math.sqrt(self.d_k)
        if mask is not None:
            scores = scores.masked_fill(~mask[:, None, None, :].bool(), torch.finfo(scores.dtype).min)
        return self.wo(torch.einsum("bhts,bshd->bthd", scores.softmax(-1), v).reshape(B, T, D))


class LlamaBlock(nn.Module):
    """A Llama-style pre-norm block: RMSNorm, grouped-query attention, SwiGLU feed-forward."""

    def __init__(self, d_model, n_heads):
        super().__init__()
        self.attn_norm, self.ffn_norm = nn.RMSNorm(d_model, eps=1e-6), nn.RMSNorm(d_model, eps=1e-6)
        self.attn = GroupedQueryAttention(d_model, n_heads)
        self.gate_proj = nn.Linear(d_model, 3 * d_model, bias=False)
        self.up_proj = nn.Linear(d_model, 3 * d_model, bias=False)
        self.down_proj = nn.Linear(3 * d_model, d_model, bias=False)

    def forward(self, x, mask=None):
        x = x + self.attn(self.attn_norm(x), mask)[0]
        h = self.ffn_norm(x)
        return x + self.down_proj(nn.functional.silu(self.gate_proj(h)) * self.up_proj(h))


class Renamed(nn.Module):
    """Names no rule can guess (--map), and 2 key/value heads: the doctor reads Hkv from the mapped k's size."""

    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h, self.d_k = n_heads, d_model // n_heads
        self.alpha, self.delta = nn.Linear(d_model, d_model), nn.Linear(d_model, d_model)
        self.beta, self.gamma = nn.Linear(d_model, 2 * self.d_k), nn.Linear(d_model, 2 * self.d_k)

    def forward(self, x):
        B, T, D = x.shape
        q = self.alpha(x).view(B, T, self.h, -1).transpose(1, 2)
        k, v = (f(x).view(B, T, 2, -1).transpose(1, 2).repeat_interleave(self.h // 2, 1)
                for f in (self.beta, self.gamma))
        w = (q @ k.transpose(-2, -1) / math.sqrt(self.d_k)).softmax(-1)
        return self.delta((w @ v).transpose(1, 2).reshape(B, T, D))


class TiledHalfResidualInside(TiledGroups):
    """A mistake the zoo does not know: half the input added back after the output projection."""

    def forward(self, x, mask=None):
        out, attn = super().forward(x, mask)
        return 0.5 * x + out, attn
