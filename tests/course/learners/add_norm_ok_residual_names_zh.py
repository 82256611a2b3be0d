from torch import nn


class PostNorm(nn.Module):
    """原论文：先加残差，再归一化"""

    def __init__(self, d_model, sublayer):
        super().__init__()
        self.层 = sublayer
        self.范数 = nn.LayerNorm(d_model)

    def forward(self, x):
        残差 = x
        x = self.层(x)
        x = 残差 + x
        return self.范数(x)


class PreNorm(nn.Module):
    """先归一化，进子层，再加残差"""

    def __init__(self, d_model, sublayer):
        super().__init__()
        self.层 = sublayer
        self.范数 = nn.LayerNorm(d_model)

    def forward(self, x):
        残差 = x
        x = self.范数(x)
        x = self.层(x)
        return 残差 + x
