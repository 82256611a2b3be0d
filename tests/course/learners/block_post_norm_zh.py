import math

import torch
from torch import nn


class TransformerBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff):
        super().__init__()
        self.注意力 = nn.MultiheadAttention(d_model, n_heads, batch_first=True)
        self.前馈 = nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model))
        self.归一1 = nn.LayerNorm(d_model)
        self.归一2 = nn.LayerNorm(d_model)

    def forward(self, x, mask=None):
        遮 = None if mask is None else ~mask[0, 0]
        x = self.归一1(x + self.注意力(x, x, x, attn_mask=遮)[0])  # <-- pitfall post_norm_instead
        x = self.归一2(x + self.前馈(x))
        return x
