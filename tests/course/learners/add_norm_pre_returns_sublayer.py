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
        self.norm = nn.LayerNorm(d_model)

    def forward(self, x):
        out = self.sublayer(self.norm(x))  # <-- pitfall missing_residual
        return out
