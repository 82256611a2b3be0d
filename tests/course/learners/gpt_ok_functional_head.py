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


def sinusoidal(t, d):
    pos = torch.arange(t, dtype=torch.float64)[:, None]
    angle = pos / 10000 ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
    pe = torch.zeros(t, d, dtype=torch.float64)
    pe[:, 0::2], pe[:, 1::2] = torch.sin(angle), torch.cos(angle)
    return pe


class GPT(nn.Module):
    def __init__(self, vocab_size, d_model, n_heads, n_layers, block_size):
        super().__init__()
        self.d_model = d_model
        self.emb = nn.Embedding(vocab_size, d_model)
        self.layers = nn.ModuleList(TransformerBlock(d_model, n_heads, 4 * d_model) for _ in range(n_layers))
        self.norm = nn.LayerNorm(d_model)

    def forward(self, ids, targets=None):
        t = ids.shape[1]
        x = self.emb(ids) * math.sqrt(self.d_model)  # the paper multiplies the embedding by sqrt(d_model)
        x = x + sinusoidal(t, self.d_model).to(x.dtype)
        causal = torch.ones(t, t, dtype=torch.bool).tril()[None, None]
        for layer in self.layers:
            x = layer(x, causal)
        logits = F.linear(self.norm(x), self.emb.weight)  # the head is the embedding itself
        if targets is None:
            return logits
        loss = F.cross_entropy(logits[:, :-1].transpose(1, 2), targets[:, 1:], ignore_index=PAD)
        return logits, loss
