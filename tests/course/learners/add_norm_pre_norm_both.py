from torch import nn


class PostNorm(nn.Module):
    def __init__(self, d_model, sublayer):
        super().__init__()
        self.sublayer, self.norm = sublayer, nn.LayerNorm(d_model)

    def forward(self, x):
        return self.norm(x + self.sublayer(x))


class PreNorm(nn.Module):
    def __init__(self, d_model, sublayer):
        super().__init__()
        self.sublayer, self.norm = sublayer, nn.LayerNorm(d_model)

    def forward(self, x):
        h = self.norm(x)
        return h + self.sublayer(h)  # <-- pitfall norm_on_residual_path
