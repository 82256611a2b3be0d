"""More ways learners write attention: bare Parameters with einsum, per-head weight tensors, the annotated
transformer's four cloned Linears, names no rule can guess, two mistakes at once, and a mistake the zoo does not
know."""

import math

import torch
import torch.nn as nn


class EinsumParams(nn.Module):
    """W_Q (D, D) used as x @ W_Q; an additive float mask (B, 1, T, S)."""

    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h = n_heads
        self.W_Q, self.W_K, self.W_V, self.W_O = (nn.Parameter(torch.randn(d_model, d_model) / d_model**0.5)
                                                  for _ in range(4))
        self.b_Q, self.b_K, self.b_V, self.b_O = (nn.Parameter(torch.zeros(d_model)) for _ in range(4))

    def forward(self, x, attn_mask=None):
        B, T, D = x.shape
        q = (x @ self.W_Q + self.b_Q).view(B, T, self.h, -1)
        k = (x @ self.W_K + self.b_K).view(B, T, self.h, -1)
        v = (x @ self.W_V + self.b_V).view(B, T, self.h, -1)
        scores = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(D // self.h)
        if attn_mask is not None:
            scores = scores + attn_mask
        z = torch.einsum("bhqk,bkhd->bqhd", scores.softmax(-1), v).reshape(B, T, D)
        return z @ self.W_O + self.b_O


class HeadParams(nn.Module):
    """TransformerLens-style per-head tensors: W_Q (H, D, Dh), W_O (H, Dh, D); no mask."""

    def __init__(self, d_model, n_heads):
        super().__init__()
        dh = d_model // n_heads
        self.W_Q = nn.Parameter(torch.randn(n_heads, d_model, dh))
        self.W_K = nn.Parameter(torch.randn(n_heads, d_model, dh))
        self.W_V = nn.Parameter(torch.randn(n_heads, d_model, dh))
        self.W_O = nn.Parameter(torch.randn(n_heads, dh, d_model))
        self.b_Q = nn.Parameter(torch.zeros(n_heads, dh))
        self.b_K = nn.Parameter(torch.zeros(n_heads, dh))
        self.b_V = nn.Parameter(torch.zeros(n_heads, dh))
        self.b_O = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        q = torch.einsum("btd,hde->bthe", x, self.W_Q) + self.b_Q
        k = torch.einsum("btd,hde->bthe", x, self.W_K) + self.b_K
        v = torch.einsum("btd,hde->bthe", x, self.W_V) + self.b_V
        scores = torch.einsum("bthe,bshe->bhts", q, k) / math.sqrt(q.shape[-1])
        z = torch.einsum("bhts,bshe->bthe", scores.softmax(-1), v)
        return torch.einsum("bthe,hed->btd", z, self.W_O) + self.b_O


class Annotated(nn.Module):
    """The annotated transformer's layout: 4 cloned Linears, forward(query, key, value, mask), -1e9 fill."""

    def __init__(self, d_model, n_heads):
        super().__init__()
        self.d_k, self.h = d_model // n_heads, n_heads
        self.linears = nn.ModuleList([nn.Linear(d_model, d_model) for _ in range(4)])

    def forward(self, query, key, value, mask=None):
        if mask is not None:
            mask = mask.unsqueeze(1)
        nbatches = query.size(0)
        query, key, value = [lin(x).view(nbatches, -1, self.h, self.d_k).transpose(1, 2)
                             for lin, x in zip(self.linears, (query, key, value))]
        scores = torch.matmul(query, key.transpose(-2, -1)) / math.sqrt(self.d_k)
        if mask is not None:
            scores = scores.masked_fill(mask == 0, -1e9)
        p_attn = scores.softmax(dim=-1)
        x = torch.matmul(p_attn, value).transpose(1, 2).contiguous().view(nbatches, -1, self.h * self.d_k)
        return self.linears[-1](x)


class Renamed(nn.Module):
    """Names no rule can guess: the doctor needs --map."""

    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h = n_heads
        self.alpha, self.beta, self.gamma, self.delta = (nn.Linear(d_model, d_model) for _ in range(4))

    def forward(self, x):
        B, T, D = x.shape
        q, k, v = (f(x).view(B, T, self.h, -1).transpose(1, 2) for f in (self.alpha, self.beta, self.gamma))
        w = (q @ k.transpose(-2, -1) / math.sqrt(D // self.h)).softmax(-1)
        return self.delta((w @ v).transpose(1, 2).reshape(B, T, D))


class TwoMistakes(nn.Module):
    """No scaling *and* no transpose before the merge: no single fault of the zoo reproduces it, the pair does."""

    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h = n_heads
        self.q_proj, self.k_proj, self.v_proj, self.o_proj = (nn.Linear(d_model, d_model) for _ in range(4))

    def forward(self, x):
        B, T, D = x.shape
        q, k, v = (f(x).view(B, T, self.h, -1).transpose(1, 2) for f in (self.q_proj, self.k_proj, self.v_proj))
        w = (q @ k.transpose(-2, -1)).softmax(-1)
        return self.o_proj((w @ v).reshape(B, T, D))


class SoftmaxOverQueries(nn.Module):
    """A mistake the bug zoo does not know, alone or paired: softmax over the queries (dim=-2), not the keys."""

    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h = n_heads
        self.q_proj, self.k_proj, self.v_proj, self.o_proj = (nn.Linear(d_model, d_model) for _ in range(4))

    def forward(self, x):
        B, T, D = x.shape
        q, k, v = (f(x).view(B, T, self.h, -1).transpose(1, 2) for f in (self.q_proj, self.k_proj, self.v_proj))
        w = (q @ k.transpose(-2, -1) / math.sqrt(D // self.h)).softmax(-2)
        return self.o_proj((w @ v).transpose(1, 2).reshape(B, T, D))
