from torch import nn

norm = None  # one LayerNorm for the whole file


class PostNorm(nn.Module):
    def __init__(self, d_model, sublayer):
        super().__init__()
        global norm
        if norm is None:
            norm = nn.LayerNorm(d_model)
        self.sublayer = sublayer

    def forward(self, x):
        return norm(x + self.sublayer(x))  # <-- pitfall shared_layernorm


class PreNorm(nn.Module):
    def __init__(self, d_model, sublayer):
        super().__init__()
        global norm
        if norm is None:
            norm = nn.LayerNorm(d_model)
        self.sublayer = sublayer

    def forward(self, x):
        return x + self.sublayer(norm(x))
