import torch
from torch import nn


class LayerNorm(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.缩放 = nn.Parameter(torch.zeros(d_model))  # <-- pitfall norm_init_swapped
        self.平移 = nn.Parameter(torch.ones(d_model))

    def forward(self, x):
        均值 = x.mean(-1, keepdim=True)
        方差 = x.var(-1, keepdim=True, unbiased=False)
        return self.缩放 * (x - 均值) / torch.sqrt(方差 + self.eps) + self.平移
