import numpy as np
import torch
import torch.nn as nn


class ScaledDotProductAttention(nn.Module):
    def __init__(self, d_k):
        super().__init__()
        self.d_k = d_k

    def forward(self, Q, K, V, attn_mask):
        scores = torch.matmul(Q, K.transpose(-1, -2)) / np.sqrt(self.d_k)
        scores.masked_fill_(attn_mask, float("-inf"))  # <-- pitfall mask_inverted
        attn = nn.Softmax(dim=-1)(scores)
        return torch.matmul(attn, V), attn


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.d_k = d_model // n_heads
        self.n_heads = n_heads
        self.W_Q = nn.Linear(d_model, self.d_k * n_heads, bias=False)
        self.W_K = nn.Linear(d_model, self.d_k * n_heads, bias=False)
        self.W_V = nn.Linear(d_model, self.d_k * n_heads, bias=False)
        self.fc = nn.Linear(n_heads * self.d_k, d_model, bias=False)

    def forward(self, x, mask=None):
        batch_size = x.size(0)
        Q = self.W_Q(x).view(batch_size, -1, self.n_heads, self.d_k).transpose(1, 2)
        K = self.W_K(x).view(batch_size, -1, self.n_heads, self.d_k).transpose(1, 2)
        V = self.W_V(x).view(batch_size, -1, self.n_heads, self.d_k).transpose(1, 2)
        if mask is None:
            mask = torch.zeros(1, 1, x.size(1), x.size(1), dtype=torch.bool)
        context, attn = ScaledDotProductAttention(self.d_k)(Q, K, V, mask)
        context = context.transpose(1, 2).reshape(batch_size, -1, self.n_heads * self.d_k)
        return self.fc(context), attn
