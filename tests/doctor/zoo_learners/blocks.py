"""Blocks whose parts are arranged the way course projects arrange them: the norm inside the attention module,
residual and norm inside each sub-layer module ("complete" sub-layers), the pre-norm given to the query only,
an extra activation at the end of the FFN. Built as CLASS(d_model, n_heads); forward(x) returns the output only.
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class MHA(nn.Module):
    def __init__(self, d_model, n_heads, scale=None):
        super().__init__()
        self.h, self.dk = n_heads, d_model // n_heads
        self.scale = 1 / math.sqrt(self.dk) if scale is None else scale
        self.wq = nn.Linear(d_model, d_model)
        self.wk = nn.Linear(d_model, d_model)
        self.wv = nn.Linear(d_model, d_model)
        self.wo = nn.Linear(d_model, d_model)

    def forward(self, q, k=None, v=None):
        k = q if k is None else k
        v = k if v is None else v
        b, t, d = q.shape
        q = self.wq(q).view(b, t, self.h, self.dk).transpose(1, 2)
        k = self.wk(k).view(b, -1, self.h, self.dk).transpose(1, 2)
        v = self.wv(v).view(b, -1, self.h, self.dk).transpose(1, 2)
        w = torch.softmax(q @ k.transpose(-2, -1) * self.scale, dim=-1)
        return self.wo((w @ v).transpose(1, 2).reshape(b, t, d))


class PreNormAttention(nn.Module):
    """the sub-layer owns its norm and its residual: x + attn(norm(x))"""

    def __init__(self, d_model, n_heads, scale=None):
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.attn = MHA(d_model, n_heads, scale)

    def forward(self, x):
        return x + self.attn(self.norm(x))


class PreNormFeedForward(nn.Module):
    def __init__(self, d_model, d_ff, residual=True):
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.net = nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model))
        self.residual = residual

    def forward(self, x):
        y = self.net(self.norm(x))
        return x + y if self.residual else y


class CompleteSublayers(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.attn = PreNormAttention(d_model, n_heads)
        self.ff = PreNormFeedForward(d_model, 4 * d_model)

    def forward(self, x):
        return self.ff(self.attn(x))


class CompleteSublayersFFNNoResidual(CompleteSublayers):
    def __init__(self, d_model, n_heads):
        super().__init__(d_model, n_heads)
        self.ff = PreNormFeedForward(d_model, 4 * d_model, residual=False)


class CompleteSublayersScaledByDModel(CompleteSublayers):
    def __init__(self, d_model, n_heads):
        super().__init__(d_model, n_heads)
        self.attn = PreNormAttention(d_model, n_heads, scale=1 / math.sqrt(d_model))


class AttentionWithNorm(nn.Module):
    """the attention module normalises its own input (a pre-norm attention), the block adds the residual"""

    def __init__(self, d_model, n_heads):
        super().__init__()
        self.ln = nn.LayerNorm(d_model)
        self.mha = MHA(d_model, n_heads)

    def forward(self, x):
        return self.mha(self.ln(x))


class NormInsideAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.attention = AttentionWithNorm(d_model, n_heads)
        self.ln_ff = nn.LayerNorm(d_model)
        self.fc1 = nn.Linear(d_model, 4 * d_model)
        self.fc2 = nn.Linear(4 * d_model, d_model)

    def forward(self, x):
        x = x + self.attention(x)
        return x + self.fc2(F.relu(self.fc1(self.ln_ff(x))))


class PreNormBlock(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = MHA(d_model, n_heads)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class QueryOnlyPreNorm(PreNormBlock):
    """the norm is given to the query; keys and values see the raw stream"""

    def forward(self, x):
        x = x + self.attn(self.ln1(x), x, x)
        return x + self.mlp(self.ln2(x))


class ExtraActivationScaledByDModel(PreNormBlock):
    """a GELU after the FFN's last Linear (a variation outside the reference) and scores scaled by sqrt(d_model)"""

    def __init__(self, d_model, n_heads):
        super().__init__(d_model, n_heads)
        self.attn = MHA(d_model, n_heads, scale=1 / math.sqrt(d_model))
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model),
                                 nn.GELU())


class ExtraActivation(ExtraActivationScaledByDModel):
    def __init__(self, d_model, n_heads):
        super().__init__(d_model, n_heads)
        self.attn = MHA(d_model, n_heads)


class TorchMHABlock(nn.Module):
    """a post-norm block around nn.MultiheadAttention with an extra Linear after it"""

    def __init__(self, d_model, n_heads):
        super().__init__()
        self.mha = nn.MultiheadAttention(d_model, n_heads, batch_first=True)
        self.proj = nn.Linear(d_model, d_model)
        self.norm1 = nn.LayerNorm(d_model)
        self.ff = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.ReLU(), nn.Linear(4 * d_model, d_model))
        self.norm2 = nn.LayerNorm(d_model)

    def forward(self, x):
        a = self.proj(self.mha(x, x, x, need_weights=False)[0])
        x = self.norm1(x + a)
        return self.norm2(x + self.ff(x))
