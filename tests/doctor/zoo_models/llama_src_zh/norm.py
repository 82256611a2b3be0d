# Re-typed after datawhalechina/base-nlp code/C6/llama2/src/norm.py (see __init__.py): RMSNorm computed in float32.
import torch
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        y = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps)
        return y.type_as(x) * self.weight
