import torch.nn as nn


class PostNorm(nn.Module):
    def __init__(self, d_model, sublayer):
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.sublayer = sublayer

    def forward(self, x):
        return x + self.norm(self.sublayer(x))  # <-- pitfall norm_after_sublayer


class PreNorm(nn.Module):
    def __init__(self, d_model, sublayer):
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.sublayer = sublayer

    def forward(self, x):
        return x + self.sublayer(self.norm(x))
