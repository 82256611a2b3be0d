import math

import torch
import torch.nn.functional as F
from torch import nn

PAD = 0

class TransformerBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff):
        super().__init__()
        self.h, self.d_k = n_heads, d_model // n_heads
        self.wq = nn.Linear(d_model, d_model)
        self.wk = nn.Linear(d_model, d_model)
        self.wv = nn.Linear(d_model, d_model)
        self.wo = nn.Linear(d_model, d_model)
        self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.ff = nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model))

    def attn(self, x, mask):
        b, t, d = x.shape
        q = self.wq(x).view(b, t, self.h, self.d_k).transpose(1, 2)
        k = self.wk(x).view(b, t, self.h, self.d_k).transpose(1, 2)
        v = self.wv(x).view(b, t, self.h, self.d_k).transpose(1, 2)
        s = q @ k.transpose(-2, -1) / math.sqrt(self.d_k)
        if mask is not None:
            s = s.masked_fill(~mask, float("-inf"))
        return self.wo((s.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d))

    def forward(self, x, mask=None):
        x = x + self.attn(self.ln1(x), mask)
        return x + self.ff(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab_size, d_model, n_heads, n_layers, block_size):
        super().__init__()
        self.tok = nn.Embedding(vocab_size, d_model)
        self.pos = nn.Embedding(2 * block_size, d_model)
        self.blocks = nn.ModuleList([TransformerBlock(d_model, n_heads, 4 * d_model) for _ in range(n_layers)])
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size, bias=False)
        self.head.weight = self.tok.weight

    def forward(self, ids, targets=None):
        t = ids.shape[1]
        x = self.tok(ids) + self.pos(torch.arange(t))
        mask = torch.tril(torch.ones(t, t, dtype=torch.bool))
        for block in self.blocks:
            x = block(x, mask)
        logits = self.head(self.norm(x))
        if targets is None:
            return logits, None
        loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.size(-1)), targets[:, 1:].reshape(-1), ignore_index=PAD)
        return logits, loss
