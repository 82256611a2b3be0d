"""A learner's merge with one transpose too many: ``.transpose(1, 2).transpose(1, 2)`` undo each other before the
reshape (the trace must not call it a missing transpose)."""

import math

import torch
from torch import nn


class ExtraTranspose(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.h, self.dk = h, d // h
        self.q = nn.Linear(d, d)
        self.k = nn.Linear(d, d)
        self.v = nn.Linear(d, d)
        self.o = nn.Linear(d, d)

    def forward(self, x):
        b, t, d = x.shape
        q = self.q(x).view(b, t, self.h, self.dk).transpose(1, 2)  # (B, H, T, Dh)
        k = self.k(x).view(b, t, self.h, self.dk).transpose(1, 2)
        v = self.v(x).view(b, t, self.h, self.dk).transpose(1, 2)
        w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(self.dk), dim=-1)
        return self.o((w @ v).transpose(1, 2).transpose(1, 2).reshape(b, t, d))  # (B, H, T, Dh) read as (B, T, D)
