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


class Embeddings(nn.Module):
    def __init__(self, vocab_size, d_model):
        super().__init__()
        self.lut = nn.Embedding(vocab_size, d_model)
        self.d_model = d_model

    def forward(self, x):
        return self.lut(x) * math.sqrt(self.d_model)


class PositionalEncoding(nn.Module):
    def __init__(self, d_model, max_len):
        super().__init__()
        pe = torch.zeros(max_len, d_model)
        position = torch.arange(0, max_len).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2) * -(math.log(10000.0) / d_model))
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        self.register_buffer("pe", pe.unsqueeze(0))

    def forward(self, x):
        return x + self.pe[:, : x.size(1)]


class GPT(nn.Module):
    def __init__(self, vocab_size, d_model, n_heads, n_layers, block_size):
        super().__init__()
        self.d_model = d_model
        self.embed = Embeddings(vocab_size, d_model)
        self.pos = PositionalEncoding(d_model, block_size)
        self.layers = nn.ModuleList([TransformerBlock(d_model, n_heads, 4 * d_model) for _ in range(n_layers)])
        self.norm = nn.LayerNorm(d_model)
        self.generator = nn.Linear(d_model, vocab_size, bias=False)
        self.generator.weight = self.embed.lut.weight

    def forward(self, ids, targets=None):
        t = ids.size(1)
        x = self.embed(ids) * math.sqrt(self.d_model)  # <-- pitfall embedding_scaled_twice
        x = self.pos(x)
        mask = torch.tril(torch.ones(t, t)).unsqueeze(0).unsqueeze(0) == 1
        for layer in self.layers:
            x = layer(x, mask)
        logits = self.generator(self.norm(x))
        if targets is None:
            return logits, None
        loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.size(-1)), targets[:, 1:].reshape(-1), ignore_index=PAD)
        return logits, loss
