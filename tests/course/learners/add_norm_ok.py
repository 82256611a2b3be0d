import torch.nn as nn


class PostNorm(nn.Module):
    def __init__(self, d_model, sublayer):
        super().__init__()
        self.ln = nn.LayerNorm(d_model)
        self.fn = sublayer

    def forward(self, x):
        residual = x
        x = self.fn(x)
        return self.ln(residual + x)


class PreNorm(nn.Module):
    def __init__(self, d_model, sublayer):
        super().__init__()
        self.ln = nn.LayerNorm(d_model)
        self.fn = sublayer

    def forward(self, x):
        return x + self.fn(self.ln(x))
