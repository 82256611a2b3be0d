import torch.nn as nn
import torch.nn.functional as F


class PostNorm(nn.Module):
    def __init__(self, d_model, sublayer):
        super().__init__()
        self.子层 = sublayer
        self.归一化 = nn.LayerNorm(d_model)

    def forward(self, x):
        残差 = x
        return self.归一化(残差 + self.子层(x))


class PreNorm(nn.Module):
    def __init__(self, d_model, sublayer):
        super().__init__()
        self.子层 = sublayer
        self.权重 = nn.Parameter(__import__("torch").ones(d_model))
        self.偏置 = nn.Parameter(__import__("torch").zeros(d_model))

    def forward(self, x):
        return x + self.子层(F.layer_norm(x, x.shape[-1:], self.权重, self.偏置))
