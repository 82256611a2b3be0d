from torch import nn


class PostNorm(nn.Module):
    def __init__(self, d_model, sublayer):
        super().__init__()
        self.子层 = sublayer
        self.归一化 = nn.LayerNorm(d_model, elementwise_affine=False)

    def forward(self, x):
        return self.归一化(x + self.子层(x))  # <-- pitfall norm_without_parameters


class PreNorm(nn.Module):
    def __init__(self, d_model, sublayer):
        super().__init__()
        self.子层 = sublayer
        self.归一化 = nn.LayerNorm(d_model)

    def forward(self, x):
        return x + self.子层(self.归一化(x))
