"""Named designs written again in other hands (the recognisers must not be fit to one file): each class follows a
real design (named above it) in a layout of our own; "injected" marks a bug we put in. Built as
``CLASS(d_model, n_heads)``; ``x`` is ``(B, T, D)``."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class FusedAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)  # (3, B, H, T, Dh)
        w = torch.softmax(q @ k.transpose(-2, -1) / (d // self.heads) ** 0.5, dim=-1)
        return self.out((w @ v).transpose(1, 2).reshape(b, t, d))  # (B, T, D)


# LayerScale as in DINOv2 / CaiT, with gains named for their branch (scale_attn, scale_ffn) on a post-norm block
# (LayerScale does not depend on where the norm sits)
class PostNormLayerScale(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.attention = FusedAttention(dim, heads)
        self.ln_attn = nn.LayerNorm(dim)
        self.fc_in = nn.Linear(dim, 2 * dim)
        self.fc_out = nn.Linear(2 * dim, dim)
        self.ln_ffn = nn.LayerNorm(dim)
        self.scale_attn = nn.Parameter(torch.full((dim,), 0.1))
        self.scale_ffn = nn.Parameter(torch.full((dim,), 0.1))

    def forward(self, x):
        x = self.ln_attn(x + self.scale_attn * self.attention(x))
        return self.ln_ffn(x + self.scale_ffn * self.fc_out(F.relu(self.fc_in(x))))


# LayerScale on the attention branch only (timm's Block with ls2 = Identity)
class LayerScaleAttnOnly(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = FusedAttention(dim, heads)
        self.gamma = nn.Parameter(1e-4 * torch.ones(dim))
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        x = x + self.attn(self.norm1(x)) * self.gamma
        return x + self.mlp(self.norm2(x))


# injected into timm's LayerScale Block: the attention branch's residual forgotten (x = ls1(attn(norm1(x))))
class LayerScaleNoResidual(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = FusedAttention(dim, heads)
        self.ls1 = nn.Parameter(1e-5 * torch.ones(dim))
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        self.ls2 = nn.Parameter(1e-5 * torch.ones(dim))

    def forward(self, x):
        x = self.ls1 * self.attn(self.norm1(x))
        return x + self.ls2 * self.mlp(self.norm2(x))


class SwiGLU(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.w_gate = nn.Linear(dim, hidden, bias=False)
        self.w_up = nn.Linear(dim, hidden, bias=False)
        self.w_down = nn.Linear(hidden, dim, bias=False)

    def forward(self, x):
        return self.w_down(F.silu(self.w_gate(x)) * self.w_up(x))


# res-post-norm as in Swin Transformer v2, in a decoder-style layout: RMSNorm on each branch's output, a SwiGLU
class ResPostRMSBlock(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.attn = FusedAttention(dim, heads)
        self.attn_out_norm = nn.RMSNorm(dim, eps=1e-6)
        self.mlp = SwiGLU(dim, 3 * dim)
        self.mlp_out_norm = nn.RMSNorm(dim, eps=1e-6)

    def forward(self, x):
        h = x + self.attn_out_norm(self.attn(x))
        return h + self.mlp_out_norm(self.mlp(h))


# injected into Swin v2's res-post-norm block: norm1 used on both branches (norm2 built and never called)
class ResPostSharedNorm(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.attn = FusedAttention(dim, heads)
        self.norm1 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        self.norm2 = nn.LayerNorm(dim)

    def forward(self, x):
        x = x + self.norm1(self.attn(x))
        return x + self.norm1(self.mlp(x))


# injected into Swin v2's res-post-norm block: the FFN branch's residual forgotten
class ResPostNoResidual(ResPostSharedNorm):
    def forward(self, x):
        x = x + self.norm1(self.attn(x))
        return self.norm2(self.mlp(x))


# OLMo-1's non-parametric LayerNorm inline, in a post-norm block with a helper function (called twice: two
# identical norms, nothing shared)
def _norm(x):
    return F.layer_norm(x, x.shape[-1:], eps=1e-5)


class FunctionalPostNorm(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.attn = FusedAttention(dim, heads)
        self.ff = nn.Sequential(nn.Linear(dim, 4 * dim), nn.ReLU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        x = _norm(x + self.attn(x))
        return _norm(x + self.ff(x))


# injected into the functional pre-norm block: the attention's residual forgotten
class FunctionalNormNoResidual(FunctionalPostNorm):
    def forward(self, x):
        x = self.attn(_norm(x))
        return x + self.ff(_norm(x))


def _causal_bucket(relative, num_buckets, max_distance=128):
    """T5's decoder bucketing (only the past has distinct buckets): exact for small distances, then log-spaced."""
    n = (-relative).clamp_min(0)
    exact = num_buckets // 2
    large = exact + (torch.log(n.float() / exact + 1e-6) / math.log(max_distance / exact)
                     * (num_buckets - exact)).to(torch.long)
    return torch.where(n < exact, n, large.clamp_max(num_buckets - 1))


# T5's decoder self-attention (modeling_t5.py with is_decoder=True), as one fused projection and a bias Parameter
# table: causal, unidirectional buckets, no 1/sqrt(Dh)
class T5CausalAttention(nn.Module):
    def __init__(self, dim, heads, buckets=16):
        super().__init__()
        self.heads, self.buckets = heads, buckets
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.o = nn.Linear(dim, dim, bias=False)
        self.rel_bias = nn.Embedding(buckets, heads)

    def bias(self, t):
        pos = torch.arange(t)
        return self.rel_bias(_causal_bucket(pos[None, :] - pos[:, None], self.buckets)).permute(2, 0, 1)  # (H, T, S)

    def scores(self, q, k):
        return q @ k.transpose(-2, -1)  # unscaled by design

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)  # (3, B, H, T, Dh)
        s = self.scores(q, k) + self.bias(t)
        s = s.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
        return self.o((torch.softmax(s, dim=-1) @ v).transpose(1, 2).reshape(b, t, d))  # (B, T, D)


# injected into T5's decoder attention: scaled by the model width on top of the design's unscaled scores
class T5ScaledByDModel(T5CausalAttention):
    def scores(self, q, k):
        return q @ k.transpose(-2, -1) / math.sqrt(self.o.in_features)


# Gemma's RMSNorm written again (zero-centred gain: output * (1 + weight), all in float64 here)
class ZeroCentredRMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.scale = nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * (1 + self.scale)


# a Gemma-style pre-norm block: (1 + weight) RMSNorms, a SwiGLU
class GemmaStyleBlock(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.pre_attn_norm = ZeroCentredRMSNorm(dim)
        self.attn = FusedAttention(dim, heads)
        self.pre_ffn_norm = ZeroCentredRMSNorm(dim)
        self.ffn = SwiGLU(dim, 3 * dim)

    def forward(self, x):
        x = x + self.attn(self.pre_attn_norm(x))
        return x + self.ffn(self.pre_ffn_norm(x))


# injected into the Gemma-style block: the attention's norm reused for the FFN (pre_ffn_norm never called)
class GemmaStyleSharedNorm(GemmaStyleBlock):
    def forward(self, x):
        x = x + self.attn(self.pre_attn_norm(x))
        return x + self.ffn(self.pre_attn_norm(x))


# the Conv1d(kernel 1) feed-forward of attention-is-all-you-need-pytorch in a pre-norm block, the convolutions in
# a Sequential over (B, D, T)
class ConvFFNPreNorm(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.norm_a = nn.LayerNorm(dim)
        self.attn = FusedAttention(dim, heads)
        self.norm_f = nn.LayerNorm(dim)
        self.conv = nn.Sequential(nn.Conv1d(dim, 4 * dim, kernel_size=1), nn.GELU(), nn.Conv1d(4 * dim, dim, 1))

    def ffn(self, x):
        return self.conv(x.transpose(1, 2)).transpose(1, 2)  # (B, D, T) for the convolutions, back to (B, T, D)

    def forward(self, x):
        x = x + self.attn(self.norm_a(x))
        return x + self.ffn(self.norm_f(x))


# injected into the Conv1d pre-norm block: the attention's residual forgotten
class ConvFFNNoAttnResidual(ConvFFNPreNorm):
    def forward(self, x):
        x = self.attn(self.norm_a(x))
        return x + self.ffn(self.norm_f(x))


# vit-pytorch's Attention with its pre-norm inside, written with separate projections and an RMSNorm
class RMSNormInsideAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.norm = nn.RMSNorm(dim, eps=1e-6)
        self.to_q, self.to_k, self.to_v = (nn.Linear(dim, dim, bias=False) for _ in range(3))
        self.to_out = nn.Linear(dim, dim)

    def attend(self, q, k):
        return torch.softmax(q @ k.transpose(-2, -1) * (q.shape[-1] ** -0.5), dim=-1)

    def forward(self, x):
        b, t, d = x.shape
        x = self.norm(x)
        q, k, v = (f(x).view(b, t, self.heads, -1).transpose(1, 2) for f in (self.to_q, self.to_k, self.to_v))
        return self.to_out((self.attend(q, k) @ v).transpose(1, 2).reshape(b, t, d))  # (B, T, D)


# injected into the attention with its own pre-norm: the scores scaled by the model width
class RMSNormInsideScaledByDModel(RMSNormInsideAttention):
    def attend(self, q, k):
        return torch.softmax(q @ k.transpose(-2, -1) / self.to_q.in_features ** 0.5, dim=-1)


# attention-is-all-you-need-pytorch's MultiHeadAttention (residual + LayerNorm inside) with forward(x) only
class ResidualNormInsideAttention(RMSNormInsideAttention):
    def __init__(self, dim, heads):
        super().__init__(dim, heads)
        self.norm = nn.LayerNorm(dim)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = (f(x).view(b, t, self.heads, -1).transpose(1, 2) for f in (self.to_q, self.to_k, self.to_v))
        return self.norm(x + self.to_out((self.attend(q, k) @ v).transpose(1, 2).reshape(b, t, d)))
