"""A learner's causal attention over a sliding window (Mistral, Gemma's local layers, LLMs-from-scratch's SWA GPT):
each query sees itself and the `window - 1` tokens before it, the mask built from query and key positions.

Written without any of `anatomy`'s code. `SlidingWindowAttention` is correct; `WindowPeeksAhead` keeps one future
token in the band (`k_pos <= q_pos + 1`). Returns `(out, attn)`.
"""

import math

import torch
import torch.nn as nn


class SlidingWindowAttention(nn.Module):
    window = 3

    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h, self.dk = n_heads, d_model // n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)

    def band(self, T, device):
        q_pos = torch.arange(T, device=device)[:, None]
        k_pos = torch.arange(T, device=device)[None, :]
        return (k_pos <= q_pos) & (k_pos > q_pos - self.window)  # True = may attend

    def forward(self, x):
        B, T, D = x.shape
        q, k, v = self.qkv(x).split(D, dim=-1)
        q = q.view(B, T, self.h, self.dk).transpose(1, 2)
        k = k.view(B, T, self.h, self.dk).transpose(1, 2)
        v = v.view(B, T, self.h, self.dk).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(self.dk)
        att = att.masked_fill(~self.band(T, x.device), float("-inf"))
        att = att.softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, D)
        return self.proj(y), att


class WindowPeeksAhead(SlidingWindowAttention):
    def band(self, T, device):
        q_pos = torch.arange(T, device=device)[:, None]
        k_pos = torch.arange(T, device=device)[None, :]
        return (k_pos <= q_pos + 1) & (k_pos > q_pos - self.window)
