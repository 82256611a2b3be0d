# A careful student's block: Pre-Norm, written step by step with named residuals.
import math

import torch
from torch import nn


class TransformerBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff):
        super().__init__()
        self.n_heads = n_heads
        self.d_head = d_model // n_heads
        self.w_q = nn.Linear(d_model, d_model)
        self.w_k = nn.Linear(d_model, d_model)
        self.w_v = nn.Linear(d_model, d_model)
        self.w_o = nn.Linear(d_model, d_model)
        self.ln1 = nn.LayerNorm(d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.fc1 = nn.Linear(d_model, d_ff)
        self.fc2 = nn.Linear(d_ff, d_model)

    def mha(self, x, mask):
        batch, length, width = x.shape
        q = self.w_q(x).view(batch, length, self.n_heads, self.d_head).transpose(1, 2)
        k = self.w_k(x).view(batch, length, self.n_heads, self.d_head).transpose(1, 2)
        v = self.w_v(x).view(batch, length, self.n_heads, self.d_head).transpose(1, 2)
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(self.d_head)
        if mask is not None:
            scores = scores.masked_fill(mask == 0, float("-inf"))
        attn = torch.softmax(scores, dim=-1)
        out = torch.matmul(attn, v).transpose(1, 2).contiguous().view(batch, length, width)
        return self.w_o(out)

    def forward(self, x, mask=None):
        residual = x
        h = residual + self.mha(self.ln1(x), mask)
        ffn_out = self.fc2(torch.nn.functional.gelu(self.fc1(self.ln2(h))))
        return residual + ffn_out  # <-- pitfall second_residual_from_input
