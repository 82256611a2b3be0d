"""A Hugging Face-style causal LM (Qwen2/Llama-like naming): the causal and padding masks made additive in float32
(``finfo(float32).min``, as the training dtype's minimum; two of them add up to -inf), the attention through
``F.scaled_dot_product_attention(attn_mask=...)``, RMSNorm, SwiGLU, rotary positions from ``position_ids``, the loss
shifted inside (``labels`` = the inputs, the pads marked -100 by the collator); correct as written."""

import torch
import torch.nn.functional as F
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        return self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class Attention(nn.Module):
    def __init__(self, hidden_size, num_heads, max_positions):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = hidden_size // num_heads
        self.q_proj = nn.Linear(hidden_size, hidden_size, bias=True)
        self.k_proj = nn.Linear(hidden_size, hidden_size, bias=True)
        self.v_proj = nn.Linear(hidden_size, hidden_size, bias=True)
        self.o_proj = nn.Linear(hidden_size, hidden_size, bias=False)
        inv_freq = 1.0 / (10000 ** (torch.arange(0, self.head_dim, 2, dtype=torch.float32) / self.head_dim))
        angles = torch.outer(torch.arange(max_positions, dtype=torch.float32), inv_freq)
        self.register_buffer("cos", torch.cat((angles, angles), -1).cos(), persistent=False)
        self.register_buffer("sin", torch.cat((angles, angles), -1).sin(), persistent=False)

    def forward(self, hidden_states, position_ids, attention_mask):
        b, t, _ = hidden_states.shape
        q = self.q_proj(hidden_states).view(b, t, self.num_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(hidden_states).view(b, t, self.num_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(hidden_states).view(b, t, self.num_heads, self.head_dim).transpose(1, 2)
        cos, sin = self.cos[position_ids].unsqueeze(1), self.sin[position_ids].unsqueeze(1)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=attention_mask)
        return self.o_proj(out.transpose(1, 2).reshape(b, t, -1))


class DecoderLayer(nn.Module):
    def __init__(self, hidden_size, num_heads, max_positions):
        super().__init__()
        self.self_attn = Attention(hidden_size, num_heads, max_positions)
        self.gate_proj = nn.Linear(hidden_size, 3 * hidden_size, bias=False)
        self.up_proj = nn.Linear(hidden_size, 3 * hidden_size, bias=False)
        self.down_proj = nn.Linear(3 * hidden_size, hidden_size, bias=False)
        self.input_layernorm = RMSNorm(hidden_size)
        self.post_attention_layernorm = RMSNorm(hidden_size)

    def forward(self, hidden_states, position_ids, attention_mask):
        hidden_states = hidden_states + self.self_attn(
            self.input_layernorm(hidden_states), position_ids, attention_mask
        )
        h = self.post_attention_layernorm(hidden_states)
        return hidden_states + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class CausalLM(nn.Module):
    def __init__(self, vocab_size, hidden_size, num_heads, num_layers, max_positions):
        super().__init__()
        self.vocab_size = vocab_size
        self.embed_tokens = nn.Embedding(vocab_size, hidden_size)
        self.layers = nn.ModuleList([DecoderLayer(hidden_size, num_heads, max_positions) for _ in range(num_layers)])
        self.norm = RMSNorm(hidden_size)
        self.lm_head = nn.Linear(hidden_size, vocab_size, bias=False)

    def forward(self, input_ids, attention_mask=None, labels=None):
        b, t = input_ids.shape
        position_ids = torch.arange(t, device=input_ids.device).unsqueeze(0).expand(b, -1)
        min_value = torch.finfo(torch.float32).min
        mask = torch.full((t, t), min_value, dtype=torch.float32, device=input_ids.device).triu(1)
        mask = mask[None, None].expand(b, 1, t, t)
        if attention_mask is not None:
            mask = mask + (1.0 - attention_mask[:, None, None, :].to(torch.float32)) * min_value
        hidden_states = self.embed_tokens(input_ids)
        for layer in self.layers:
            hidden_states = layer(hidden_states, position_ids, mask)
        logits = self.lm_head(self.norm(hidden_states))
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits[:, :-1].reshape(-1, self.vocab_size), labels[:, 1:].reshape(-1))
        return logits, loss
