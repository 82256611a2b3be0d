import math
import torch
import torch.nn as nn
import torch.nn.functional as F


class TransformerBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff):
        super().__init__()
        self.h = n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ln_1, self.ln_2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.up, self.down = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)

    def forward(self, x, mask=None):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.h, C // self.h).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        if mask is not None:
            att = att.masked_fill(~mask, float("-inf"))
        y = F.softmax(att, dim=-1) @ v
        x = x + self.proj(y.transpose(1, 2).contiguous().view(B, T, C))
        return x + F.gelu(self.down(F.gelu(self.up(self.ln_2(x)))))  # <-- pitfall ffn_extra_activation
