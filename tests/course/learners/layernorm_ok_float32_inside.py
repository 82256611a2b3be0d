import torch
from torch import nn


class LayerNorm(nn.Module):
    """计算统计量时先转成 float32，再转回输入的类型"""

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))
        self.eps = eps

    def forward(self, x):
        h = x.float()
        mean = h.mean(-1, keepdim=True)
        var = (h - mean).pow(2).mean(-1, keepdim=True)
        h = (h - mean) / torch.sqrt(var + self.eps)
        return self.weight * h.to(x.dtype) + self.bias
