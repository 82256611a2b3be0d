"""Attention slips found in public code (issue 29, item 2), re-typed in a layout of our own; each class keeps the
slip of the code it follows. Run verbatim through ``anatomy check`` before and after the doctor learned the slip:

- ``Seq2SeqSoftmaxOverHeads``: a seq2seq Transformer's ``Multi_Head_Attention`` (code search, a translation
  project): ``energy = Q @ K.permute(0, 1, 3, 2) / scale``, ``mask.repeat``, ``-1e10``, then
  ``torch.softmax(energy, dim=1)`` over the heads. Before: exit 1 with the leaks unnamed; after: named.
- ``OneHeadSoftmaxOverQueries``: a minimal one-head self-attention whose author marked the slip as injected
  (``attn.softmax(dim=1)`` on (B, T, S), no scale, no output projection). Before: exit 0; after: both named.
- ``AnnotatedDropoutAlwaysOn``: an Annotated-Transformer copy whose free ``attention`` calls
  ``F.dropout(p_attn, p=dropout)`` (training defaults to True). Before: "token order" and "batch rows" errors,
  unnamed; after: dropout left on at evaluation, with its line.

Built as ``CLASS(d_model, n_heads)``; ``x`` is ``(B, T, D)``."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Seq2SeqSoftmaxOverHeads(nn.Module):
    def __init__(self, d_model, n_heads, dropout=0.1):
        super().__init__()
        self.d_model, self.n_heads, self.head_dim = d_model, n_heads, d_model // n_heads
        self.fc_q = nn.Linear(d_model, d_model)
        self.fc_k = nn.Linear(d_model, d_model)
        self.fc_v = nn.Linear(d_model, d_model)
        self.fc_o = nn.Linear(d_model, d_model)
        self.dropout = nn.Dropout(dropout)
        self.scale = torch.sqrt(torch.tensor([float(self.head_dim)]))

    def attend(self, Q, K, V, mask):
        energy = torch.matmul(Q, K.permute(0, 1, 3, 2)) / self.scale
        mask = mask.repeat(1, energy.size(1), 1, 1)
        energy = energy.masked_fill(mask == 0, -1e10)
        attention = torch.softmax(energy, dim=1)
        return torch.matmul(self.dropout(attention), V), attention

    def forward(self, query, key, value, mask=None):
        n = query.shape[0]
        Q, K, V = (
            fc(t).view(n, -1, self.n_heads, self.head_dim).permute(0, 2, 1, 3)
            for fc, t in ((self.fc_q, query), (self.fc_k, key), (self.fc_v, value))
        )
        x, _ = self.attend(Q, K, V, mask)
        x = x.permute(0, 2, 1, 3).contiguous().view(n, -1, self.d_model)
        return self.fc_o(x)


class OneHeadSoftmaxOverQueries(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.query, self.key, self.value = (nn.Linear(d_model, d_model) for _ in range(3))

    def forward(self, x):
        q, k, v = self.query(x), self.key(x), self.value(x)
        attn = torch.einsum("btd,bsd->bts", q, k)
        attn = attn.softmax(dim=1)
        return torch.einsum("bts,bsd->btd", attn, v)


def attention(query, key, value, mask=None, dropout=0.0):
    d_k = query.size(-1)
    scores = torch.matmul(query, key.transpose(-2, -1)).div(math.sqrt(d_k))
    if mask is not None:
        scores = scores.masked_fill(mask == 0, -1e9)
    p_attn = F.softmax(scores, dim=-1)
    p_attn = F.dropout(p_attn, p=dropout)
    return torch.matmul(p_attn, value), p_attn


class AnnotatedDropoutAlwaysOn(nn.Module):
    def __init__(self, d_model, n_heads, dropout=0.1):
        super().__init__()
        self.d_k, self.h, self.p = d_model // n_heads, n_heads, dropout
        self.linears = nn.ModuleList(nn.Linear(d_model, d_model) for _ in range(4))

    def forward(self, query, key, value, mask=None):
        if mask is not None:
            mask = mask.unsqueeze(1)
        n = query.size(0)
        query, key, value = (
            lin(t).view(n, -1, self.h, self.d_k).transpose(1, 2) for lin, t in zip(self.linears, (query, key, value))
        )
        x, _ = attention(query, key, value, mask=mask, dropout=self.p)
        return self.linears[-1](x.transpose(1, 2).contiguous().view(n, -1, self.h * self.d_k))
