import torch
import torch.nn.functional as F
from torch import nn


class TransformerBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff):
        super().__init__()
        self.头数 = n_heads
        self.层归一化1 = nn.LayerNorm(d_model)
        self.层归一化2 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.输出投影 = nn.Linear(d_model, d_model)
        self.前馈 = nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model))

    def forward(self, x, mask=None):
        b, t, d = x.shape
        h = self.层归一化1(x)
        q, k, v = self.qkv(h).view(b, t, 3, self.头数, d // self.头数).permute(2, 0, 3, 1, 4)
        注意力 = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # mask: True = 可以关注
        x = x + self.输出投影(注意力.transpose(1, 2).reshape(b, t, d))
        return x + self.前馈(self.层归一化2(x))
