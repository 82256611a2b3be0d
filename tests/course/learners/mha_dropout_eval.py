import math

import torch
import torch.nn.functional as F
from torch import nn


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads, dropout=0.1):
        super().__init__()
        self.h, self.dk = n_heads, d_model // n_heads
        self.wq, self.wk = nn.Linear(d_model, d_model), nn.Linear(d_model, d_model)
        self.wv, self.wo = nn.Linear(d_model, d_model), nn.Linear(d_model, d_model)
        self.p = dropout

    def forward(self, x, mask=None):
        b, t, _ = x.shape
        q, k, v = (w(x).view(b, t, self.h, self.dk).transpose(1, 2) for w in (self.wq, self.wk, self.wv))
        s = q @ k.transpose(-2, -1) / math.sqrt(self.dk)
        if mask is not None:
            s = s.masked_fill(~mask, float("-inf"))
        a = F.dropout(F.softmax(s, dim=-1), p=self.p)  # <-- pitfall dropout_at_eval
        return self.wo((a @ v).transpose(1, 2).reshape(b, t, -1)), a
