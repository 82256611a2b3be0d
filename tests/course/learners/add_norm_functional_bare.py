import torch.nn.functional as F
from torch import nn


class PostNorm(nn.Module):
    def __init__(self, d_model, sublayer):
        super().__init__()
        self.sublayer = sublayer
        self.norm = nn.LayerNorm(d_model)

    def forward(self, x):
        return self.norm(x + self.sublayer(x))


class PreNorm(nn.Module):
    def __init__(self, d_model, sublayer):
        super().__init__()
        self.sublayer = sublayer
        self.d_model = d_model

    def forward(self, x):
        return x + self.sublayer(F.layer_norm(x, (self.d_model,)))  # <-- pitfall norm_without_parameters
