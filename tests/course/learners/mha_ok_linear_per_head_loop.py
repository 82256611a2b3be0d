# one Linear per role, applied inside the loop over heads (and sliced there)
import math

import torch
from torch import nn


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads, self.d_head = n_heads, d_model // n_heads
        self.Wq = nn.Linear(d_model, d_model)
        self.Wk = nn.Linear(d_model, d_model)
        self.Wv = nn.Linear(d_model, d_model)
        self.Wo = nn.Linear(d_model, d_model)

    def forward(self, x, mask=None):
        outs, ws = [], []
        for i in range(self.n_heads):
            cols = slice(i * self.d_head, (i + 1) * self.d_head)
            q, k, v = self.Wq(x)[..., cols], self.Wk(x)[..., cols], self.Wv(x)[..., cols]
            s = q @ k.transpose(-1, -2) / math.sqrt(self.d_head)
            if mask is not None:
                s = s.masked_fill(~mask[:, 0], float("-inf"))
            w = torch.softmax(s, -1)
            outs.append(w @ v)
            ws.append(w)
        return self.Wo(torch.cat(outs, -1)), torch.stack(ws, 1)
