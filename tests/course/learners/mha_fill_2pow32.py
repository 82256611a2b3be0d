import math
import torch
import torch.nn as nn


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h = n_heads
        self.Wq = nn.Linear(d_model, d_model, bias=False)
        self.Wk = nn.Linear(d_model, d_model, bias=False)
        self.Wv = nn.Linear(d_model, d_model, bias=False)
        self.Wo = nn.Linear(d_model, d_model)

    def forward(self, x, mask=None):
        B, T, D = x.shape
        q = self.Wq(x).view(B, T, self.h, -1).transpose(1, 2)
        k = self.Wk(x).view(B, T, self.h, -1).transpose(1, 2)
        v = self.Wv(x).view(B, T, self.h, -1).transpose(1, 2)
        s = q @ k.transpose(-1, -2) / math.sqrt(D // self.h)
        if mask is not None:
            s = torch.where(mask, s, torch.full_like(s, -2 ** 32 + 1))  # <-- pitfall fill_minus_1e9
        w = s.softmax(-1)
        return self.Wo((w @ v).transpose(1, 2).reshape(B, T, D)), w
