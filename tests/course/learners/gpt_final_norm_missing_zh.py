import math

import torch
import torch.nn.functional as F
from torch import nn

PAD = 0

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


class GPT(nn.Module):
    def __init__(self, vocab_size, d_model, n_heads, n_layers, block_size):
        super().__init__()
        self.词表 = nn.Embedding(vocab_size, d_model)
        self.位置表 = nn.Embedding(block_size, d_model)
        self.堆叠 = nn.Sequential(*[TransformerBlock(d_model, n_heads, 4 * d_model) for _ in range(n_layers)])
        self.输出头 = nn.Linear(d_model, vocab_size, bias=False)
        self.输出头.weight = self.词表.weight

    def forward(self, ids, targets=None):
        长 = ids.size(1)
        h = self.词表(ids) + self.位置表.weight[:长]
        掩码 = torch.ones(长, 长, dtype=torch.bool).tril()[None, None]
        for 块 in self.堆叠:
            h = 块(h, 掩码)
        logits = self.输出头(h)  # <-- pitfall final_norm_missing
        if targets is None:
            return logits, None
        return logits, F.cross_entropy(logits[:, :-1].reshape(-1, logits.size(-1)), targets[:, 1:].reshape(-1), ignore_index=PAD)
