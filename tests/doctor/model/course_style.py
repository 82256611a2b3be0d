"""中文课程风格的完整 GPT（Chinese course code, Chinese comments): positional arguments, a pad id, the token
embedding scaled by sqrt(d_model), a sinusoidal table, Post-Norm blocks taking a combined causal + padding mask,
the loss ignoring the pads, generate with a temperature; correct as written."""

import math

import torch
import torch.nn.functional as F
from torch import nn


class 多头注意力(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h = n_heads
        self.d_k = d_model // n_heads
        # 查询、键、值三个投影，再加一个输出投影
        self.W_q = nn.Linear(d_model, d_model)
        self.W_k = nn.Linear(d_model, d_model)
        self.W_v = nn.Linear(d_model, d_model)
        self.W_o = nn.Linear(d_model, d_model)

    def forward(self, x, mask):
        b, t, _ = x.shape
        # 拆成多个头：(b, t, d) -> (b, h, t, d_k)
        q = self.W_q(x).view(b, t, self.h, self.d_k).transpose(1, 2)
        k = self.W_k(x).view(b, t, self.h, self.d_k).transpose(1, 2)
        v = self.W_v(x).view(b, t, self.h, self.d_k).transpose(1, 2)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_k)  # 除以 sqrt(d_k)
        scores = scores.masked_fill(mask == 0, -1e9)  # 被遮住的位置填一个很小的数
        attn = torch.softmax(scores, dim=-1)
        out = (attn @ v).transpose(1, 2).reshape(b, t, -1)  # 合并各个头
        return self.W_o(out)


class 解码层(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.attn = 多头注意力(d_model, n_heads)
        self.ffn = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.ReLU(), nn.Linear(4 * d_model, d_model))
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.drop = nn.Dropout(0.1)

    def forward(self, x, mask):
        # Post-Norm：先残差相加，再归一化
        x = self.norm1(x + self.drop(self.attn(x, mask)))
        x = self.norm2(x + self.drop(self.ffn(x)))
        return x


class GPT(nn.Module):
    def __init__(self, vocab_size, d_model, n_heads, n_layers, max_len, pad_id=0):
        super().__init__()
        self.d_model = d_model
        self.pad_id = pad_id
        self.embed = nn.Embedding(vocab_size, d_model, padding_idx=pad_id)
        # 正弦位置编码，注册成 buffer（不参与训练）
        pe = torch.zeros(max_len, d_model)
        pos = torch.arange(max_len).unsqueeze(1).float()
        div = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model))
        pe[:, 0::2] = torch.sin(pos * div)
        pe[:, 1::2] = torch.cos(pos * div)
        self.register_buffer("pe", pe)
        self.layers = nn.ModuleList([解码层(d_model, n_heads) for _ in range(n_layers)])
        self.head = nn.Linear(d_model, vocab_size, bias=False)
        self.head.weight = self.embed.weight  # 输出头与嵌入共享权重

    def forward(self, x, y=None, padding_mask=None):
        b, t = x.shape
        # 因果 mask 与 padding mask 合并：1 表示可以看
        mask = torch.tril(torch.ones(t, t, device=x.device)).view(1, 1, t, t)
        if padding_mask is not None:
            mask = mask * padding_mask.view(b, 1, 1, t)
        h = self.embed(x) * math.sqrt(self.d_model)  # 嵌入乘以 sqrt(d_model)
        h = h + self.pe[:t]
        for layer in self.layers:
            h = layer(h, mask)
        logits = self.head(h)
        if y is None:
            return logits
        # pad 不计入损失
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1), ignore_index=self.pad_id)
        return logits, loss

    @torch.no_grad()
    def generate(self, x, n_new, temperature=1.0):
        for _ in range(n_new):
            logits = self(x)
            probs = F.softmax(logits[:, -1] / temperature, dim=-1)  # 先除以温度，再 softmax
            nxt = torch.multinomial(probs, 1)
            x = torch.cat([x, nxt], dim=1)
        return x
