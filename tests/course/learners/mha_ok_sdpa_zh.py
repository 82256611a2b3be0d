import torch
import torch.nn.functional as F
from torch import nn


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.头数 = n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.输出 = nn.Linear(d_model, d_model)

    def forward(self, x, mask=None):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.头数, d // self.头数).permute(2, 0, 3, 1, 4)
        # 权重单独算一份用来返回
        分数 = q @ k.transpose(-2, -1) * (d // self.头数) ** -0.5
        if mask is not None:
            分数 = 分数.masked_fill(~mask, float("-inf"))
        权重 = 分数.softmax(-1)
        输出 = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.输出(输出.transpose(1, 2).reshape(b, t, d)), 权重
