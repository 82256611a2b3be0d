import math

import torch
import torch.nn.functional as F
from torch import nn

PAD = 0

class LayerNorm(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.gamma = nn.Parameter(torch.ones(d_model))
        self.beta = nn.Parameter(torch.zeros(d_model))
        self.eps = eps

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        var = x.var(-1, keepdim=True, unbiased=False)
        return self.gamma * (x - mean) / torch.sqrt(var + self.eps) + self.beta


class TransformerBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff):
        super().__init__()
        self.h = n_heads
        self.norm1 = LayerNorm(d_model)
        self.norm2 = LayerNorm(d_model)
        self.q = nn.Linear(d_model, d_model)
        self.k = nn.Linear(d_model, d_model)
        self.v = nn.Linear(d_model, d_model)
        self.o = nn.Linear(d_model, d_model)
        self.fc1 = nn.Linear(d_model, d_ff)
        self.fc2 = nn.Linear(d_ff, d_model)

    def forward(self, x, mask=None):
        b, t, d = x.shape
        h = self.norm1(x)
        q = self.q(h).reshape(b, t, self.h, -1).transpose(1, 2)
        k = self.k(h).reshape(b, t, self.h, -1).transpose(1, 2)
        v = self.v(h).reshape(b, t, self.h, -1).transpose(1, 2)
        scores = torch.einsum("bhtd,bhsd->bhts", q, k) / math.sqrt(q.shape[-1])
        if mask is not None:
            scores = scores.masked_fill(mask.logical_not(), torch.finfo(scores.dtype).min)
        att = torch.einsum("bhts,bhsd->bhtd", scores.softmax(dim=-1), v)
        x = x + self.o(att.transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


class GPT(nn.Module):
    def __init__(self, vocab_size, d_model, n_heads, n_layers, block_size):
        super().__init__()
        self.emb = nn.Embedding(vocab_size, d_model)
        self.pos = nn.Embedding(block_size, d_model)
        self.blocks = nn.ModuleList([TransformerBlock(d_model, n_heads, 4 * d_model) for _ in range(n_layers)])
        self.norm = nn.LayerNorm(d_model)
        self.lm = nn.Linear(d_model, vocab_size, bias=False)
        self.lm.weight = self.emb.weight

    def forward(self, ids, targets=None):
        t = ids.shape[1]
        x = self.emb(ids) + self.pos(torch.arange(t))
        mask = torch.ones(t, t, dtype=torch.bool).tril()
        for block in self.blocks:
            x = block(x, mask)
        logits = self.lm(self.norm(x))
        if targets is None:
            return logits, None
        loss = F.cross_entropy(logits.transpose(1, 2), targets, ignore_index=PAD)  # <-- pitfall targets_not_shifted
        return logits, loss
