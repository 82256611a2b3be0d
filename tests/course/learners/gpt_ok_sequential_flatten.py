import math

import torch
import torch.nn.functional as F
from torch import nn

PAD = 0

class TransformerBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff):
        super().__init__()
        self.n_head = n_heads
        self.ln_1 = nn.LayerNorm(d_model)
        self.c_attn = nn.Linear(d_model, 3 * d_model)
        self.c_proj = nn.Linear(d_model, d_model)
        self.ln_2 = nn.LayerNorm(d_model)
        self.c_fc = nn.Linear(d_model, d_ff)
        self.mlp_proj = nn.Linear(d_ff, d_model)
        self.resid_dropout = nn.Dropout(0.1)

    def attn(self, x, mask):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        if mask is not None:
            att = att.masked_fill(~mask, float("-inf"))
        y = (F.softmax(att, dim=-1) @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))

    def forward(self, x, mask=None):
        x = x + self.attn(self.ln_1(x), mask)
        x = x + self.resid_dropout(self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)))))
        return x


class GPT(nn.Module):
    def __init__(self, vocab_size, d_model, n_heads, n_layers, block_size):
        super().__init__()
        pe = torch.zeros(block_size, d_model)
        pos = torch.arange(block_size, dtype=torch.float).unsqueeze(1)
        div = 10000 ** (torch.arange(0, d_model, 2, dtype=torch.float) / d_model)
        pe[:, 0::2] = torch.sin(pos / div)
        pe[:, 1::2] = torch.cos(pos / div)
        self.register_buffer("pe", pe)
        self.tok = nn.Embedding(vocab_size, d_model)
        self.blocks = nn.ModuleList([TransformerBlock(d_model, n_heads, 4 * d_model) for _ in range(n_layers)])
        self.ln = nn.LayerNorm(d_model)
        self.out = nn.Linear(d_model, vocab_size, bias=False)
        self.out.weight = self.tok.weight
        self.drop = nn.Dropout(0.1)

    def forward(self, ids, targets=None):
        t = ids.size(1)
        x = self.drop(self.tok(ids) + self.pe[:t])
        mask = torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1).logical_not()
        for block in self.blocks:
            x = block(x, mask)
        logits = self.out(self.ln(x))
        if targets is None:
            return logits, None
        loss = F.cross_entropy(torch.flatten(logits[:, :-1], 0, 1), torch.flatten(targets[:, 1:]), ignore_index=PAD)
        return logits, loss
