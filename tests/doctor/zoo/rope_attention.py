"""A learner's attention with rotary position embeddings inside it (post §3.4), written without `anatomy`.

`RoPEAttention` rotates q and k pairwise as complex numbers: pairs (2i, 2i+1), angle p * 10000^(-2i/d_k) (the
"interleaved" layout of the RoFormer paper). `HalfRoPEAttention` pairs i with i + d_k/2 (GPT-NeoX / Llama's
"rotate_half"); `Llama3RoPE` the same at Llama 3's base 500000. `CausalRoPE` is a decoder's: a causal mask
inside, no mask argument. `RoPENoScaling` forgets 1/sqrt(d_k). `ALiBiAttention` rotates nothing and adds
ALiBi's bias, -slope_h * |i - j| with the paper's slopes. `AbsoluteInside` adds a sinusoidal table to q and k
instead: positions are absolute, so shifting every position changes the output. Mask: `(B, S)`, True = real
token. Returns `(out, attn)`.
"""

import math

import torch
import torch.nn as nn


def angles(t, d_k, device, dtype, base=10000.0):
    inv = base ** (-torch.arange(0, d_k, 2, device=device, dtype=dtype) / d_k)  # (d_k/2,)
    return torch.arange(t, device=device, dtype=dtype)[:, None] * inv[None, :]  # (T, d_k/2)


def rotate_pairs(x):  # x: (B, h, T, d_k), pairs (2i, 2i+1)
    b, h, t, d = x.shape
    z = torch.view_as_complex(x.reshape(b, h, t, d // 2, 2).contiguous())
    turned = z * torch.polar(torch.ones(t, d // 2, dtype=x.dtype), angles(t, d, x.device, x.dtype))
    return torch.view_as_real(turned).reshape(b, h, t, d)


def rotate_half(x, base=10000.0):  # pairs (i, i + d_k/2)
    t, d = x.shape[-2], x.shape[-1]
    a = angles(t, d, x.device, x.dtype, base)
    cos, sin = torch.cat([a.cos(), a.cos()], -1), torch.cat([a.sin(), a.sin()], -1)
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return x * cos + torch.cat([-x2, x1], -1) * sin


class RoPEAttention(nn.Module):
    rotate = staticmethod(rotate_pairs)
    causal = False
    scaled = True

    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h, self.d_k = n_heads, d_model // n_heads
        self.wq, self.wk = nn.Linear(d_model, d_model), nn.Linear(d_model, d_model)
        self.wv, self.wo = nn.Linear(d_model, d_model), nn.Linear(d_model, d_model)

    def split(self, y, b, t):
        return y.view(b, t, self.h, self.d_k).transpose(1, 2)

    def forward(self, x, mask=None):
        b, t, d = x.shape
        q, k = self.rotate(self.split(self.wq(x), b, t)), self.rotate(self.split(self.wk(x), b, t))
        v = self.split(self.wv(x), b, t)
        scores = q @ k.transpose(-2, -1)
        if self.scaled:
            scores = scores / math.sqrt(self.d_k)
        if self.causal:
            scores = scores.masked_fill(~torch.ones(t, t, dtype=torch.bool).tril(), float("-inf"))
        if mask is not None:
            scores = scores.masked_fill(~mask.bool()[:, None, None, :], float("-inf"))
        attn = scores.softmax(-1)
        return self.wo((attn @ v).transpose(1, 2).reshape(b, t, d)), attn


class HalfRoPEAttention(RoPEAttention):
    rotate = staticmethod(rotate_half)


class Llama3RoPE(RoPEAttention):
    rotate = staticmethod(lambda x: rotate_half(x, base=500000.0))  # Llama 3's rope_theta


class CausalRoPE(HalfRoPEAttention):
    causal = True

    def forward(self, x):
        return super().forward(x)


class RoPENoScaling(RoPEAttention):
    scaled = False


class AbsoluteInside(RoPEAttention):
    @staticmethod
    def rotate(x):
        t, d = x.shape[-2], x.shape[-1]
        a = angles(t, d, x.device, x.dtype)
        return x + torch.cat([a.sin(), a.cos()], -1)


class ALiBiAttention(RoPEAttention):
    @staticmethod
    def rotate(x):
        return x

    def forward(self, x, mask=None):
        b, t, d = x.shape
        slopes = torch.tensor([2.0 ** (-8.0 * (i + 1) / self.h) for i in range(self.h)], dtype=x.dtype)
        pos = torch.arange(t, dtype=x.dtype)
        bias = -slopes[:, None, None] * (pos[None, :, None] - pos[None, None, :]).abs()  # (h, T, T)
        q, k, v = (self.split(f(x), b, t) for f in (self.wq, self.wk, self.wv))
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_k) + bias
        if mask is not None:
            scores = scores.masked_fill(~mask.bool()[:, None, None, :], float("-inf"))
        attn = scores.softmax(-1)
        return self.wo((attn @ v).transpose(1, 2).reshape(b, t, d)), attn


class RoPEBlock(nn.Module):
    """A pre-norm block around `HalfRoPEAttention` (RMSNorm, SwiGLU): a Llama layer without grouped heads."""

    def __init__(self, d_model, n_heads):
        super().__init__()
        self.attn_norm, self.ffn_norm = nn.RMSNorm(d_model, eps=1e-6), nn.RMSNorm(d_model, eps=1e-6)
        self.attn = HalfRoPEAttention(d_model, n_heads)
        self.w1 = nn.Linear(d_model, 3 * d_model, bias=False)  # gate
        self.w3 = nn.Linear(d_model, 3 * d_model, bias=False)  # up
        self.w2 = nn.Linear(3 * d_model, d_model, bias=False)  # down

    def forward(self, x, mask=None):
        x = x + self.attn(self.attn_norm(x), mask)[0]
        h = self.ffn_norm(x)
        return x + self.w2(nn.functional.silu(self.w1(h)) * self.w3(h))


class CausalGQARoPE(nn.Module):
    """Llama-style: 2 key/value heads, half-layout RoPE, causal inside; takes a mask argument and ignores it."""

    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h, self.kv, self.dk = n_heads, 2, d_model // n_heads
        self.q_proj = nn.Linear(d_model, d_model, bias=False)
        self.k_proj = nn.Linear(d_model, 2 * self.dk, bias=False)
        self.v_proj = nn.Linear(d_model, 2 * self.dk, bias=False)
        self.o_proj = nn.Linear(d_model, d_model, bias=False)
    def forward(self, x, mask=None):  # noqa: ARG002 - the mask is ignored
        b, t, d = x.shape
        q = rotate_half(self.q_proj(x).view(b, t, self.h, self.dk).transpose(1, 2))
        k = rotate_half(self.k_proj(x).view(b, t, self.kv, self.dk).transpose(1, 2))
        v = self.v_proj(x).view(b, t, self.kv, self.dk).transpose(1, 2)
        k, v = (z.repeat_interleave(self.h // self.kv, 1) for z in (k, v))
        s = q @ k.transpose(-2, -1) / math.sqrt(self.dk)
        s = s.masked_fill(~torch.ones(t, t, dtype=torch.bool).tril(), float("-inf"))
        return self.o_proj((s.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d))

class CausalALiBi(nn.Module):
    """ALiBi as decoders write it: the one-sided bias -slope * (i - j) under a causal mask; fused q|k|v."""

    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h, self.dk = n_heads, d_model // n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)
    def forward(self, x):
        b, t, d = x.shape
        q, k, v = (z.view(b, t, self.h, self.dk).transpose(1, 2) for z in self.qkv(x).chunk(3, -1))
        slopes = torch.tensor([2.0 ** (-8.0 * (i + 1) / self.h) for i in range(self.h)], dtype=x.dtype)
        pos = torch.arange(t, dtype=x.dtype)
        bias = -slopes[:, None, None] * (pos[:, None] - pos[None, :])  # one-sided: i - j >= 0 below the diagonal
        s = q @ k.transpose(-2, -1) / math.sqrt(self.dk) + bias
        s = s.masked_fill(~torch.ones(t, t, dtype=torch.bool).tril(), float("-inf"))
        return self.out((s.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d))


def llama31_inv(d_k, base=500000.0):
    """Llama 3.1's frequencies: wavelengths past 8192 tokens slowed 8 times, those under 2048 kept, a blend between."""
    inv = base ** (-torch.arange(0, d_k, 2, dtype=torch.float64) / d_k)
    wavelen = 2 * math.pi / inv
    blend = ((8192 / wavelen - 1.0) / (4.0 - 1.0)).clamp(0, 1)
    mid = (1 - blend) * inv / 8 + blend * inv
    return torch.where(wavelen < 8192 / 4, inv, torch.where(wavelen > 8192, inv / 8, mid))


def rotate_pairs_llama31(x):
    b, h, t, d = x.shape
    a = torch.arange(t, dtype=torch.float64)[:, None] * llama31_inv(d)[None, :]
    z = torch.view_as_complex(x.double().reshape(b, h, t, d // 2, 2).contiguous()) * torch.polar(torch.ones_like(a), a)
    return torch.view_as_real(z).reshape(b, h, t, d).to(x.dtype)


class Llama31RoPE(RoPEAttention):
    rotate = staticmethod(rotate_pairs_llama31)


class GateCalledSecond(RoPEBlock):
    """llm.c's SwiGLU names: c_fc (up), c_fc2 (gate), c_proj (down), the gate's Linear called second."""

    def __init__(self, d_model, n_heads):
        super().__init__(d_model, n_heads)
        del self.w1, self.w2, self.w3
        self.c_fc = nn.Linear(d_model, 3 * d_model, bias=False)
        self.c_fc2 = nn.Linear(d_model, 3 * d_model, bias=False)
        self.c_proj = nn.Linear(3 * d_model, d_model, bias=False)

    def forward(self, x, mask=None):
        x = x + self.attn(self.attn_norm(x), mask)[0]
        h = self.ffn_norm(x)
        return x + self.c_proj(self.c_fc(h) * nn.functional.silu(self.c_fc2(h)))
