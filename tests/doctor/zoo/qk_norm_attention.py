"""A learner's attention with QK-norm (Qwen3 / OLMo2 style): q and k are normalised over each head's Dh features
after `view(B, T, H, Dh)`, before the scores.

Written without any of `anatomy`'s code. `QKNormAttention` (torch.nn.RMSNorm) and `QKLayerNormAttention`
(torch.nn.LayerNorm) are correct; `HandWrittenRMSNorm` is correct with its own RMSNorm class (a `weight` only) and
other names. The others carry one mistake each. Mask: `(B, S)` key padding, True = real token. Returns `(out, attn)`.
"""

import math

import torch
import torch.nn as nn


class QKNormAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h, self.d_k = n_heads, d_model // n_heads
        self.q_proj = nn.Linear(d_model, d_model, bias=False)
        self.k_proj = nn.Linear(d_model, d_model, bias=False)
        self.v_proj = nn.Linear(d_model, d_model, bias=False)
        self.o_proj = nn.Linear(d_model, d_model, bias=False)
        self.q_norm = nn.RMSNorm(self.d_k, eps=1e-6)  # one gain of width Dh, shared by the heads
        self.k_norm = nn.RMSNorm(self.d_k, eps=1e-6)

    def heads(self, x):
        B, T, D = x.shape
        q = self.q_norm(self.q_proj(x).view(B, T, self.h, self.d_k)).transpose(1, 2)  # (B, h, T, d_k)
        k = self.k_norm(self.k_proj(x).view(B, T, self.h, self.d_k)).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.h, self.d_k).transpose(1, 2)
        return q, k, v

    def attend(self, q, k, v, mask, scale):
        B, _, T, _ = q.shape
        scores = q @ k.transpose(-2, -1) * scale  # (B, h, T, T)
        if mask is not None:
            scores = scores.masked_fill(mask[:, None, None, :] == 0, torch.finfo(scores.dtype).min)
        attn = torch.softmax(scores, dim=-1)
        out = (attn @ v).transpose(1, 2).reshape(B, T, self.h * self.d_k)
        return self.o_proj(out), attn

    def forward(self, x, mask=None):
        q, k, v = self.heads(x)
        return self.attend(q, k, v, mask, 1 / math.sqrt(self.d_k))


class QKLayerNormAttention(QKNormAttention):
    """OLMo-style LayerNorm (with a bias) over each head's features, eps 1e-5."""

    def __init__(self, d_model, n_heads):
        super().__init__(d_model, n_heads)
        self.q_norm = nn.LayerNorm(self.d_k)
        self.k_norm = nn.LayerNorm(self.d_k)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)


class HandWrittenRMSNorm(nn.Module):
    """Its own RMSNorm class, names `query_norm`/`key_norm`, a fused qkv projection."""

    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h, self.d_k = n_heads, d_model // n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)
        self.query_norm = RMSNorm(self.d_k)
        self.key_norm = RMSNorm(self.d_k)

    def forward(self, x, mask=None):
        B, T, D = x.shape
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q = self.query_norm(q.view(B, T, self.h, self.d_k)).transpose(1, 2)
        k = self.key_norm(k.view(B, T, self.h, self.d_k)).transpose(1, 2)
        v = v.view(B, T, self.h, self.d_k).transpose(1, 2)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_k)
        if mask is not None:
            scores = scores.masked_fill(mask[:, None, None, :] == 0, torch.finfo(scores.dtype).min)
        attn = torch.softmax(scores, dim=-1)
        return self.out((attn @ v).transpose(1, 2).reshape(B, T, D)), attn


class NoScaling(QKNormAttention):
    """"The norm already bounds q·k": the 1/sqrt(d_k) is dropped."""

    def forward(self, x, mask=None):
        q, k, v = self.heads(x)
        return self.attend(q, k, v, mask, 1.0)


class SplitWithoutTranspose(QKNormAttention):
    def forward(self, x, mask=None):
        B, T, D = x.shape
        q = self.q_norm(self.q_proj(x).reshape(B, self.h, T, self.d_k))  # "same shape", no transpose
        k = self.k_norm(self.k_proj(x).reshape(B, self.h, T, self.d_k))
        v = self.v_proj(x).reshape(B, self.h, T, self.d_k)
        return self.attend(q, k, v, mask, 1 / math.sqrt(self.d_k))


class MaskAfterSoftmax(QKNormAttention):
    def forward(self, x, mask=None):
        B, T, D = x.shape
        q, k, v = self.heads(x)
        attn = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(self.d_k), dim=-1)
        if mask is not None:
            attn = attn * mask[:, None, None, :]  # "looks the same"
        return self.o_proj((attn @ v).transpose(1, 2).reshape(B, T, D)), attn


class NormBeforeSplit(QKNormAttention):
    """QK-norm over all D features of q and k, before the head split: one norm across the heads (OLMo2 does this
    on purpose; per-head QK-norm, ours and Qwen3's, is another model). No fault of the bug zoo is this."""

    def __init__(self, d_model, n_heads):
        super().__init__(d_model, n_heads)
        self.q_norm = nn.RMSNorm(d_model, eps=1e-6)
        self.k_norm = nn.RMSNorm(d_model, eps=1e-6)

    def forward(self, x, mask=None):
        B, T, D = x.shape
        q = self.q_norm(self.q_proj(x)).view(B, T, self.h, self.d_k).transpose(1, 2)
        k = self.k_norm(self.k_proj(x)).view(B, T, self.h, self.d_k).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.h, self.d_k).transpose(1, 2)
        return self.attend(q, k, v, mask, 1 / math.sqrt(self.d_k))


class Renamed(QKNormAttention):
    """Norms the doctor cannot tell from their names or number (three of width Dh): name them with --map."""

    def __init__(self, d_model, n_heads):
        super().__init__(d_model, n_heads)
        del self.q_norm, self.k_norm
        self.alpha, self.beta = nn.RMSNorm(self.d_k, eps=1e-6), nn.RMSNorm(self.d_k, eps=1e-6)
        self.spare = nn.RMSNorm(self.d_k)  # unused

    def heads(self, x):
        B, T, D = x.shape
        q = self.alpha(self.q_proj(x).view(B, T, self.h, self.d_k)).transpose(1, 2)
        k = self.beta(self.k_proj(x).view(B, T, self.h, self.d_k)).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.h, self.d_k).transpose(1, 2)
        return q, k, v


class QKNormBlock(nn.Module):
    """A Qwen3-style pre-norm block: RMSNorm(D) before each sub-layer, QK-norm inside the attention, a SwiGLU FFN."""

    def __init__(self, d_model, n_heads):
        super().__init__()
        self.input_layernorm = nn.RMSNorm(d_model, eps=1e-5)  # the QK-norm has 1e-6
        self.self_attn = QKNormAttention(d_model, n_heads)
        self.post_attention_layernorm = nn.RMSNorm(d_model, eps=1e-5)
        self.gate_proj = nn.Linear(d_model, 3 * d_model, bias=False)
        self.up_proj = nn.Linear(d_model, 3 * d_model, bias=False)
        self.down_proj = nn.Linear(3 * d_model, d_model, bias=False)

    def forward(self, x, mask=None):
        x = x + self.self_attn(self.input_layernorm(x), mask)[0]
        h = self.post_attention_layernorm(x)
        return x + self.down_proj(nn.functional.silu(self.gate_proj(h)) * self.up_proj(h))


class ScaledRMSNorm(nn.Module):
    """The gain called `scale` (LLMs-from-scratch's Qwen3), computed in float32 and cast back."""

    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.scale = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        dtype = x.dtype
        x = x.to(torch.float32)
        return (x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps) * self.scale).to(dtype)


class GammaBetaLayerNorm(nn.Module):
    """A LayerNorm written out with `gamma` and `beta`."""

    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.gamma = nn.Parameter(torch.ones(dim))
        self.beta = nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        mu = x.mean(-1, keepdim=True)
        var = x.var(-1, keepdim=True, unbiased=False)
        return self.gamma * (x - mu) / torch.sqrt(var + self.eps) + self.beta


class ScaleNamedGain(QKNormAttention):
    def __init__(self, d_model, n_heads):
        super().__init__(d_model, n_heads)
        self.q_norm, self.k_norm = ScaledRMSNorm(self.d_k), ScaledRMSNorm(self.d_k)


class GammaBetaNorms(QKNormAttention):
    def __init__(self, d_model, n_heads):
        super().__init__(d_model, n_heads)
        self.q_norm, self.k_norm = GammaBetaLayerNorm(self.d_k), GammaBetaLayerNorm(self.d_k)
