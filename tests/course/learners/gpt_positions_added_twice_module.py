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


class PositionalEncoding(nn.Module):
    def __init__(self, d_model, max_len):
        super().__init__()
        position = torch.arange(max_len).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
        pe = torch.zeros(max_len, d_model)
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        self.register_buffer("pe", pe)

    def forward(self, x):
        return x + self.pe[: x.size(1)]


class GPT(nn.Module):
    def __init__(self, vocab_size, d_model, n_heads, n_layers, block_size):
        super().__init__()
        self.tok = nn.Embedding(vocab_size, d_model)
        self.pos_enc = PositionalEncoding(d_model, block_size)
        self.blocks = nn.ModuleList([TransformerBlock(d_model, n_heads, 4 * d_model) for _ in range(n_layers)])
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size, bias=False)
        self.head.weight = self.tok.weight

    def forward(self, ids, targets=None):
        t = ids.size(1)
        x = self.pos_enc(self.tok(ids) + self.pos_enc.pe[:t])  # <-- pitfall positions_added_twice
        mask = torch.ones(t, t, dtype=torch.bool).tril()
        for block in self.blocks:
            x = block(x, mask)
        logits = self.head(self.norm(x))
        if targets is None:
            return logits, None
        return logits, F.cross_entropy(logits[:, :-1].reshape(-1, logits.size(-1)), targets[:, 1:].reshape(-1), ignore_index=PAD)
