import math

import torch
import torch.nn.functional as F
from torch import nn

PAD = 0

class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads = n_heads
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.o_proj = nn.Linear(d_model, d_model)

    def forward(self, x, mask=None):
        b, t, d = x.shape
        dh = d // self.n_heads
        q = self.q_proj(x).reshape(b, t, self.n_heads, dh).transpose(1, 2)
        k = self.k_proj(x).reshape(b, t, self.n_heads, dh).transpose(1, 2)
        v = self.v_proj(x).reshape(b, t, self.n_heads, dh).transpose(1, 2)
        scores = q @ k.transpose(-2, -1) / math.sqrt(dh)
        if mask is not None:
            scores = scores.masked_fill(mask == 0, float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        out = (weights @ v).transpose(1, 2).reshape(b, t, d)
        return self.o_proj(out), weights


class TransformerBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff):
        super().__init__()
        self.attn = MultiHeadAttention(d_model, n_heads)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.ffn = nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model))

    def forward(self, x, mask=None):
        attn_out, _ = self.attn(self.norm1(x), mask)
        x = x + attn_out
        x = x + self.ffn(self.norm2(x))
        return x


class GPT(nn.Module):
    def __init__(self, vocab_size, d_model, n_heads, n_layers, block_size):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab_size, d_model, padding_idx=None)
        self.embed_positions = nn.Embedding(block_size, d_model)
        self.layers = nn.ModuleList()
        for _ in range(n_layers):
            self.layers.append(TransformerBlock(d_model, n_heads, 4 * d_model))
        self.norm = nn.LayerNorm(d_model)
        self.lm_head = nn.Linear(d_model, vocab_size, bias=False)
        self.lm_head.weight = self.embed_tokens.weight
        self.loss_fct = nn.CrossEntropyLoss(ignore_index=PAD)

    def forward(self, input_ids, labels=None):
        seq_len = input_ids.shape[-1]
        position_ids = torch.arange(seq_len, device=input_ids.device).unsqueeze(0)
        hidden_states = self.embed_tokens(input_ids) + self.embed_positions(position_ids)
        causal_mask = torch.triu(torch.ones(seq_len, seq_len, device=input_ids.device), diagonal=1) == 0
        for decoder_layer in self.layers:
            hidden_states = decoder_layer(hidden_states, causal_mask[None, None, :, :])
        hidden_states = self.norm(hidden_states)
        logits = self.lm_head(hidden_states)
        loss = None
        if labels is not None:
            shift_logits = logits[..., :-1, :].contiguous()
            shift_labels = labels[..., 1:].contiguous()
            loss = self.loss_fct(shift_logits.view(-1, shift_logits.size(-1)), shift_labels.view(-1))
        return logits, loss
