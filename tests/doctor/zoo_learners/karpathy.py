"""The style of the "Let's build GPT" video lecture: one module per head, concatenated, then projected.

`Head(head_size)` owns its key/query/value Linears (no bias) and a `tril` buffer; `MultiHeadAttention(num_heads,
head_size)` holds a ModuleList of heads. Built by the factories at the bottom as (d_model, n_heads). Causal by
itself (decoder), called as forward(x), returns the output only.
"""

import torch
import torch.nn as nn
from torch.nn import functional as F

block_size = 32
dropout = 0.0


class Head(nn.Module):
    """ one head of self-attention """

    def __init__(self, n_embd, head_size):
        super().__init__()
        self.key = nn.Linear(n_embd, head_size, bias=False)
        self.query = nn.Linear(n_embd, head_size, bias=False)
        self.value = nn.Linear(n_embd, head_size, bias=False)
        self.register_buffer('tril', torch.tril(torch.ones(block_size, block_size)))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        B, T, C = x.shape
        k = self.key(x)   # (B,T,hs)
        q = self.query(x)  # (B,T,hs)
        wei = q @ k.transpose(-2, -1) * k.shape[-1]**-0.5  # (B, T, hs) @ (B, hs, T) -> (B, T, T)
        wei = wei.masked_fill(self.tril[:T, :T] == 0, float('-inf'))  # (B, T, T)
        wei = F.softmax(wei, dim=-1)  # (B, T, T)
        wei = self.dropout(wei)
        v = self.value(x)  # (B,T,hs)
        out = wei @ v  # (B, T, T) @ (B, T, hs) -> (B, T, hs)
        return out


class HeadScaledByC(Head):
    """the lecture's first version: C is the embedding size, not the head size"""

    def forward(self, x):
        B, T, C = x.shape
        k = self.key(x)
        q = self.query(x)
        wei = q @ k.transpose(-2, -1) * C**-0.5
        wei = wei.masked_fill(self.tril[:T, :T] == 0, float('-inf'))
        wei = F.softmax(wei, dim=-1)
        v = self.value(x)
        return wei @ v


class HeadNoScale(Head):
    def forward(self, x):
        B, T, C = x.shape
        k = self.key(x)
        q = self.query(x)
        wei = q @ k.transpose(-2, -1)
        wei = wei.masked_fill(self.tril[:T, :T] == 0, float('-inf'))
        wei = F.softmax(wei, dim=-1)
        v = self.value(x)
        return wei @ v


class HeadSeesNext(Head):
    """tril with diagonal=1: every position also sees the next token"""

    def __init__(self, n_embd, head_size):
        super().__init__(n_embd, head_size)
        self.register_buffer('tril', torch.tril(torch.ones(block_size, block_size), diagonal=1))


class MultiHeadAttention(nn.Module):
    """ multiple heads of self-attention in parallel """

    def __init__(self, num_heads, head_size, n_embd, head=Head, project=True):
        super().__init__()
        self.heads = nn.ModuleList([head(n_embd, head_size) for _ in range(num_heads)])
        self.proj = nn.Linear(head_size * num_heads, n_embd) if project else None
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        out = torch.cat([h(x) for h in self.heads], dim=-1)
        if self.proj is None:
            return out
        out = self.dropout(self.proj(out))
        return out


class FeedFoward(nn.Module):
    """ a simple linear layer followed by a non-linearity """

    def __init__(self, n_embd):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(n_embd, 4 * n_embd),
            nn.ReLU(),
            nn.Linear(4 * n_embd, n_embd),
            nn.Dropout(dropout),
        )

    def forward(self, x):
        return self.net(x)


class Block(nn.Module):
    """ Transformer block: communication followed by computation """

    def __init__(self, n_embd, n_head, head=Head):
        super().__init__()
        head_size = n_embd // n_head
        self.sa = MultiHeadAttention(n_head, head_size, n_embd, head=head)
        self.ffwd = FeedFoward(n_embd)
        self.ln1 = nn.LayerNorm(n_embd)
        self.ln2 = nn.LayerNorm(n_embd)

    def forward(self, x):
        x = x + self.sa(self.ln1(x))
        x = x + self.ffwd(self.ln2(x))
        return x


class BlockOneNorm(Block):
    """ln2 is never used: the same LayerNorm serves both sub-layers"""

    def forward(self, x):
        x = x + self.sa(self.ln1(x))
        x = x + self.ffwd(self.ln1(x))
        return x


def heads(d_model, n_heads):
    return MultiHeadAttention(n_heads, d_model // n_heads, d_model)


def heads_scaled_by_c(d_model, n_heads):
    return MultiHeadAttention(n_heads, d_model // n_heads, d_model, head=HeadScaledByC)


def heads_no_scale(d_model, n_heads):
    return MultiHeadAttention(n_heads, d_model // n_heads, d_model, head=HeadNoScale)


def heads_see_next(d_model, n_heads):
    return MultiHeadAttention(n_heads, d_model // n_heads, d_model, head=HeadSeesNext)


def heads_no_projection(d_model, n_heads):
    return MultiHeadAttention(n_heads, d_model // n_heads, d_model, project=False)


def block_scaled_by_c(d_model, n_heads):
    return Block(d_model, n_heads, head=HeadScaledByC)
