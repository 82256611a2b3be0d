from torch import nn


class PostNorm(nn.Module):
    def __init__(self, d_model, sublayer):
        super().__init__()
        self.子层 = sublayer
        self.归一化 = nn.BatchNorm1d(d_model)

    def forward(self, x):
        y = x + self.子层(x)
        return self.归一化(y.transpose(1, 2)).transpose(1, 2)  # <-- pitfall batchnorm_instead_of_layernorm


class PreNorm(nn.Module):
    def __init__(self, d_model, sublayer):
        super().__init__()
        self.子层 = sublayer
        self.归一化 = nn.LayerNorm(d_model)

    def forward(self, x):
        return x + self.子层(self.归一化(x))
