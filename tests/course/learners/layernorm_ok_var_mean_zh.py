import torch
from torch import nn


class LayerNorm(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.偏置 = nn.Parameter(torch.zeros(d_model))  # beta 先写
        self.增益 = nn.Parameter(torch.ones(d_model))
        self.eps = eps

    def forward(self, x):
        方差, 均值 = torch.var_mean(x, dim=-1, keepdim=True, correction=0)
        return (x - 均值) * torch.rsqrt(方差 + self.eps) * self.增益 + self.偏置
