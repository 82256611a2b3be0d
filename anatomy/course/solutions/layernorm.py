import torch
from torch import nn


class LayerNorm(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.gamma = nn.Parameter(torch.ones(d_model))
        self.beta = nn.Parameter(torch.zeros(d_model))
        self.eps = eps

    def forward(self, x):
        """Normalise each token over its features (the last dimension), then scale and shift."""
        mean = x.mean(-1, keepdim=True)  # (B, T, 1)
        var = x.var(-1, keepdim=True, unbiased=False)  # (B, T, 1): the population variance
        return self.gamma * (x - mean) / torch.sqrt(var + self.eps) + self.beta
