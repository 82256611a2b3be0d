# Re-typed after FareedKhan-dev/train-llm-from-scratch src/models/attention.py + transformer.py (a tutorial GPT with
# a different argument order and names: Transformer(n_head, n_embed, context_length, vocab_size, N_BLOCKS); per-head
# modules with a `tril` buffer; a Block with pre-LayerNorm; forward(idx, targets) where targets are already the next
# tokens; generate() reading the last position).
#   Transformer          after PR #3 ("Fix attention scaling factor": "the scaling factor ... should be
#                        1/sqrt(head_size) instead of 1/sqrt(embedding_size)", re-applied as commit 9acf1f3).
#   TransformerScaledByC real bug: the file before PR #3, `scale_factor = 1 / math.sqrt(C)` with C the embedding width.
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Head(nn.Module):
    def __init__(self, head_size, n_embed, context_length):
        super().__init__()
        self.key = nn.Linear(n_embed, head_size, bias=False)
        self.query = nn.Linear(n_embed, head_size, bias=False)
        self.value = nn.Linear(n_embed, head_size, bias=False)
        self.register_buffer('tril', torch.tril(torch.ones(context_length, context_length)))

    def scale(self, C):
        return 1 / math.sqrt(self.key.out_features)

    def forward(self, x):
        B, T, C = x.shape
        k = self.key(x)  # (B, T, head_size)
        q = self.query(x)  # (B, T, head_size)
        scale_factor = self.scale(C)
        attn_weights = q @ k.transpose(-2, -1) * scale_factor
        attn_weights = attn_weights.masked_fill(self.tril[:T, :T] == 0, float('-inf'))
        attn_weights = F.softmax(attn_weights, dim=-1)
        v = self.value(x)
        return attn_weights @ v


class HeadScaledByC(Head):
    def scale(self, C):
        scale_factor = 1 / math.sqrt(C)
        return scale_factor


class MultiHeadAttention(nn.Module):
    def __init__(self, n_head, n_embed, context_length, head=Head):
        super().__init__()
        self.heads = nn.ModuleList([head(n_embed // n_head, n_embed, context_length) for _ in range(n_head)])
        self.proj = nn.Linear(n_embed, n_embed)

    def forward(self, x):
        x = torch.cat([h(x) for h in self.heads], dim=-1)
        return self.proj(x)


class MLP(nn.Module):
    def __init__(self, n_embed):
        super().__init__()
        self.hidden = nn.Linear(n_embed, 4 * n_embed)
        self.relu = nn.ReLU()
        self.proj = nn.Linear(4 * n_embed, n_embed)

    def forward(self, x):
        return self.proj(self.relu(self.hidden(x)))


class Block(nn.Module):
    def __init__(self, n_head, n_embed, context_length, head=Head):
        super().__init__()
        self.ln1 = nn.LayerNorm(n_embed)
        self.attn = MultiHeadAttention(n_head, n_embed, context_length, head)
        self.ln2 = nn.LayerNorm(n_embed)
        self.mlp = MLP(n_embed)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        x = x + self.mlp(self.ln2(x))
        return x


class Transformer(nn.Module):
    head = Head

    def __init__(self, n_head, n_embed, context_length, vocab_size, N_BLOCKS):
        super().__init__()
        self.context_length = context_length
        self.N_BLOCKS = N_BLOCKS
        self.token_embed = nn.Embedding(vocab_size, n_embed)
        self.position_embed = nn.Embedding(context_length, n_embed)
        self.attn_blocks = nn.ModuleList([Block(n_head, n_embed, context_length, self.head) for _ in range(N_BLOCKS)])
        self.layer_norm = nn.LayerNorm(n_embed)
        self.lm_head = nn.Linear(n_embed, vocab_size)
        self.register_buffer('pos_idxs', torch.arange(context_length))

    def forward(self, idx, targets=None):
        B, T = idx.shape
        tok_emb = self.token_embed(idx)  # (B, T, C)
        pos_emb = self.position_embed(self.pos_idxs[:T])  # (T, C)
        x = tok_emb + pos_emb
        for block in self.attn_blocks:
            x = block(x)
        x = self.layer_norm(x)
        logits = self.lm_head(x)
        if targets is None:
            loss = None
        else:
            B, T, C = logits.shape
            flat_logits = logits.view(B * T, C)
            targets = targets.view(B * T).long()
            loss = F.cross_entropy(flat_logits, targets)
        return logits, loss

    def generate(self, idx, max_new_tokens):
        for _ in range(max_new_tokens):
            idx_cond = idx[:, -self.context_length:]
            logits, _ = self(idx_cond)
            logits = logits[:, -1, :]
            probs = F.softmax(logits, dim=-1)
            idx_next = torch.multinomial(probs, num_samples=1)
            idx = torch.cat((idx, idx_next), dim=1)
        return idx


class TransformerScaledByC(Transformer):
    head = HeadScaledByC
