import math

import torch
import torch.nn.functional as F
from torch import nn

PAD = 0  # 填充用的 token

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
        self.词嵌入 = nn.Embedding(vocab_size, d_model)
        位置 = torch.arange(0, block_size).unsqueeze(1).float()
        频率 = torch.exp(torch.arange(0, d_model, 2).float() * -(math.log(10000.0) / d_model))
        pe = torch.zeros(block_size, d_model)
        pe[:, 0::2] = torch.sin(位置 * 频率)
        pe[:, 1::2] = torch.cos(位置 * 频率)
        self.register_buffer("位置编码", pe.unsqueeze(0))  # (1, P, D)
        self.层 = nn.ModuleList([TransformerBlock(d_model, n_heads, 4 * d_model) for _ in range(n_layers)])
        self.最后的归一化 = nn.LayerNorm(d_model)
        self.输出层 = nn.Linear(d_model, vocab_size, bias=False)
        self.输出层.weight = self.词嵌入.weight  # 权重共享

    def forward(self, ids, targets=None):
        长度 = ids.shape[1]
        x = self.词嵌入(ids) + self.位置编码[:, :长度]
        因果掩码 = torch.tril(torch.ones(长度, 长度, dtype=torch.bool, device=ids.device))
        for 块 in self.层:
            x = 块(x, 因果掩码)
        logits = self.输出层(self.最后的归一化(x))
        if targets is None:
            return logits, None
        预测 = logits[:, :-1].flatten(0, 1)
        答案 = targets[:, 1:].flatten()
        损失 = F.cross_entropy(预测, 答案, ignore_index=PAD)
        return logits, 损失
