from torch import nn


class PostNorm(nn.Module):
    """The 2017 paper: norm(x + sublayer(x))."""

    def __init__(self, d_model, sublayer):
        super().__init__()
        self.sublayer, self.norm = sublayer, nn.LayerNorm(d_model)

    def forward(self, x):
        return self.norm(x + self.sublayer(x))


class PreNorm(nn.Module):
    """What most code does today: x + sublayer(norm(x)); the residual path stays un-normalised."""

    def __init__(self, d_model, sublayer):
        super().__init__()
        self.sublayer, self.norm = sublayer, nn.LayerNorm(d_model)

    def forward(self, x):
        return x + self.sublayer(self.norm(x))
