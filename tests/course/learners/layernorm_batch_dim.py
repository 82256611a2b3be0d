import torch
from torch import nn


class LayerNorm(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(d_model))
        self.shift = nn.Parameter(torch.zeros(d_model))
        self.eps = eps

    def forward(self, x):
        # 对 batch 求均值方差（其实是 BatchNorm 的做法）
        mu = x.mean(0, keepdim=True)  # <-- pitfall normalises_over_batch
        var = x.var(0, keepdim=True, unbiased=False)
        return self.scale * (x - mu) / torch.sqrt(var + self.eps) + self.shift
