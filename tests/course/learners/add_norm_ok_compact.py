from torch import nn


class PostNorm(nn.Sequential):
    def __init__(self, d_model, sublayer):
        super().__init__()
        self.f, self.ln = sublayer, nn.LayerNorm(d_model)

    def forward(self, x):
        return self.ln(x + self.f(x))


class PreNorm(PostNorm):
    def forward(self, x):
        return x + self.f(self.ln(x))
