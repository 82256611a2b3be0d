import math

import torch
from torch import nn


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h, self.d_k = n_heads, d_model // n_heads
        self.wq, self.wk = nn.Linear(d_model, d_model), nn.Linear(d_model, d_model)
        self.wv, self.wo = nn.Linear(d_model, d_model), nn.Linear(d_model, d_model)

    def forward(self, x, mask=None):
        b, t, d = x.shape
        q = self.wq(x).view(b, t, self.h, self.d_k).transpose(1, 2)
        k = self.wk(x).view(b, t, self.h, self.d_k).transpose(1, 2)
        v = self.wv(x).view(b, t, self.h, self.d_k).transpose(1, 2)
        s = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(self.d_k)
        if mask is not None:
            s = s.masked_fill(mask == 0, -1e9)  # <-- pitfall fill_minus_1e9
        w = torch.softmax(s, dim=-1)
        return self.wo(torch.matmul(w, v).transpose(1, 2).contiguous().view(b, t, d)), w
