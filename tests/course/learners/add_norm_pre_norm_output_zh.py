from torch import nn


class PostNorm(nn.Module):
    def __init__(self, d_model, sublayer):
        super().__init__()
        self.子层 = sublayer
        self.ln = nn.LayerNorm(d_model)

    def forward(self, x):
        return self.ln(x + self.子层(x))


class PreNorm(nn.Module):
    def __init__(self, d_model, sublayer):
        super().__init__()
        self.子层 = sublayer
        self.ln = nn.LayerNorm(d_model)

    def forward(self, x):
        return self.ln(x + self.子层(self.ln(x)))  # <-- pitfall shared_layernorm
