"""A learner's GPT-style block: Pre-Norm, ln_1/ln_2, a fused c_attn with einsum, a GELU MLP.

Written without any of `anatomy`'s code. `Block` is correct; the others carry one of the post's §4–§5 mistakes.
Mask: `key_padding_mask (B, S)`, True = padding. Returns the block's output only.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Attention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_head = n_heads
        self.c_attn = nn.Linear(d_model, 3 * d_model)
        self.c_proj = nn.Linear(d_model, d_model)

    def forward(self, x, key_padding_mask=None):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head) for t in (q, k, v))  # (B, T, nh, hs)
        att = torch.einsum("bihd,bjhd->bhij", q, k) / (C // self.n_head) ** 0.5
        if key_padding_mask is not None:
            att = att.masked_fill(key_padding_mask[:, None, None, :], torch.finfo(att.dtype).min)
        att = F.softmax(att, dim=-1)
        y = torch.einsum("bhij,bjhd->bihd", att, v).reshape(B, T, C)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, d_model):
        super().__init__()
        self.c_fc = nn.Linear(d_model, 4 * d_model)
        self.c_proj = nn.Linear(4 * d_model, d_model)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d_model)
        self.attn = Attention(d_model, n_heads)
        self.ln_2 = nn.LayerNorm(d_model)
        self.mlp = MLP(d_model)

    def forward(self, x, key_padding_mask=None):
        x = x + self.attn(self.ln_1(x), key_padding_mask)
        x = x + self.mlp(self.ln_2(x))
        return x


class SharedLayerNorm(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.ln = nn.LayerNorm(d_model)
        self.attn = Attention(d_model, n_heads)
        self.mlp = MLP(d_model)

    def forward(self, x, key_padding_mask=None):
        x = x + self.attn(self.ln(x), key_padding_mask)
        x = x + self.mlp(self.ln(x))
        return x


class NoResidual(Block):
    def forward(self, x, key_padding_mask=None):
        x = self.attn(self.ln_1(x), key_padding_mask)
        x = self.mlp(self.ln_2(x))
        return x


class NormOnResidualPath(Block):
    def forward(self, x, key_padding_mask=None):
        x = self.ln_1(x)
        x = x + self.attn(x, key_padding_mask)
        x = self.ln_2(x)
        x = x + self.mlp(x)
        return x


class UnusedSecondNorm(Block):
    """ln_2 is defined but ln_1 is used twice: the same bug as one shared LayerNorm."""

    def forward(self, x, key_padding_mask=None):
        x = x + self.attn(self.ln_1(x), key_padding_mask)
        x = x + self.mlp(self.ln_1(x))
        return x
