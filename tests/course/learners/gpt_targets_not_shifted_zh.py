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
        self.嵌入 = nn.Embedding(vocab_size, d_model)
        self.位置嵌入 = nn.Embedding(block_size, d_model)
        self.块们 = nn.ModuleList([TransformerBlock(d_model, n_heads, 4 * d_model) for _ in range(n_layers)])
        self.归一化 = nn.LayerNorm(d_model)
        self.输出 = nn.Linear(d_model, vocab_size, bias=False)
        self.嵌入.weight = self.输出.weight
        self.损失函数 = nn.CrossEntropyLoss(ignore_index=PAD)

    def forward(self, ids, targets=None):
        批, 长 = ids.shape
        位置 = torch.arange(长, device=ids.device)
        x = self.嵌入(ids) + self.位置嵌入(位置)
        掩码 = torch.tril(torch.ones(长, 长)).bool()
        for 块 in self.块们:
            x = 块(x, 掩码)
        logits = self.输出(self.归一化(x))
        if targets is None:
            return logits, None
        损失 = self.损失函数(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))  # <-- pitfall targets_not_shifted
        return logits, 损失
