"""QK-norm with a chosen temperature, after nanochat's attention (karpathy/nanochat, nanochat/gpt.py): q and k are
normalised per head by a parameter-free RMS norm, then each is multiplied by a constant gain (1.2 there), so the
scores are scaled by gain² / sqrt(head width). With |q| and |k| fixed by the norm that factor is a design knob, not
the post's forgotten sqrt(d_k).

Re-typed for the doctor's zoo, no code of `anatomy`. `GainAfterNorm` (fused SDPA, causal) and `GainAfterNormWeights`
(explicit scores, returns the weights) are designs: the doctor must name the scale as a warning, never an error.
`GainWithoutNorm` multiplies q and k by the same gains with no norm before: that is a wrong scale (an error).
`NormButUnscaled` normalises q and k and then forgets the scale entirely: still `no_scaling`.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

SHARPEN = 1.2


def unit_rms(t):
    return F.rms_norm(t, (t.shape[-1],))


class GainAfterNorm(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads = n_heads
        self.width = d_model // n_heads
        self.to_q = nn.Linear(d_model, d_model, bias=False)
        self.to_k = nn.Linear(d_model, d_model, bias=False)
        self.to_v = nn.Linear(d_model, d_model, bias=False)
        self.proj = nn.Linear(d_model, d_model, bias=False)

    def split(self, t):
        b, n, _ = t.shape
        return t.view(b, n, self.n_heads, self.width)

    def qkv(self, x):
        q, k, v = self.split(self.to_q(x)), self.split(self.to_k(x)), self.split(self.to_v(x))
        q = unit_rms(q) * SHARPEN
        k = unit_rms(k) * SHARPEN
        return q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)

    def forward(self, x):
        b, n, d = x.shape
        q, k, v = self.qkv(x)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).contiguous().view(b, n, d))


class GainAfterNormWeights(GainAfterNorm):
    def forward(self, x, mask=None):
        b, n, d = x.shape
        q, k, v = self.qkv(x)
        logits = torch.matmul(q, k.transpose(-1, -2)) * self.width**-0.5
        if mask is not None:
            logits = logits.masked_fill(~mask.bool()[:, None, None, :], torch.finfo(logits.dtype).min)
        weights = logits.softmax(dim=-1)
        y = torch.matmul(weights, v).transpose(1, 2).reshape(b, n, d)
        return self.proj(y), weights


class GainWithoutNorm(GainAfterNormWeights):
    def qkv(self, x):
        q = self.split(self.to_q(x)) * SHARPEN
        k = self.split(self.to_k(x)) * SHARPEN
        return q.transpose(1, 2), k.transpose(1, 2), self.split(self.to_v(x)).transpose(1, 2)


class NormButUnscaled(GainAfterNormWeights):
    def forward(self, x, mask=None):
        b, n, d = x.shape
        q, k, v = self.qkv(x)
        logits = q @ k.transpose(-1, -2) / SHARPEN**2  # undoes the gains: q·k of unit-RMS rows, unscaled
        if mask is not None:
            logits = logits.masked_fill(~mask.bool()[:, None, None, :], torch.finfo(logits.dtype).min)
        weights = logits.softmax(dim=-1)
        return self.proj((weights @ v).transpose(1, 2).reshape(b, n, d)), weights
