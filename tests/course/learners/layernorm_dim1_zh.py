import torch
from torch import nn


class LayerNorm(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.gamma = nn.Parameter(torch.ones(d_model))
        self.beta = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        均值 = x.mean(dim=1, keepdim=True)  # <-- pitfall normalises_over_positions
        方差 = x.var(dim=1, keepdim=True, unbiased=False)
        return self.gamma * (x - 均值) / torch.sqrt(方差 + self.eps) + self.beta
