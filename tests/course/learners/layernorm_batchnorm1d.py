import torch
from torch import nn


class LayerNorm(nn.Module):
    """I reused the BatchNorm I knew from CNNs: features on dim 1."""

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.bn = nn.BatchNorm1d(d_model, eps=eps)

    def forward(self, x):
        return self.bn(x.transpose(1, 2)).transpose(1, 2)  # <-- pitfall batchnorm_instead_of_layernorm
