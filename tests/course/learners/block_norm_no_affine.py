import math

import torch
import torch.nn.functional as F
from torch import nn


class TransformerBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff):
        super().__init__()
        self.h, self.d = n_heads, d_model
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.o_proj = nn.Linear(d_model, d_model)
        self.fc1 = nn.Linear(d_model, d_ff)
        self.fc2 = nn.Linear(d_ff, d_model)

    def attn(self, x, mask):
        b, t, d = x.shape
        q, k, v = (p(x).reshape(b, t, self.h, d // self.h).transpose(1, 2) for p in (self.q_proj, self.k_proj, self.v_proj))
        s = q @ k.transpose(-2, -1) / math.sqrt(d // self.h)
        if mask is not None:
            s = s.masked_fill(~mask, float("-inf"))
        return self.o_proj((s.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d))

    def forward(self, x, mask=None):
        x = x + self.attn(F.layer_norm(x, (self.d,)), mask)  # <-- pitfall norm_without_parameters
        return x + self.fc2(F.gelu(self.fc1(F.layer_norm(x, (self.d,)))))
