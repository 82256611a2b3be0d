# Re-typed after jingyaogong/minimind model/model_minimind.py (the MiniMind2 rewrite, at a044578, 2025-11-18; 中文注释
# as in the course): MiniMindConfig with hidden_size / num_attention_heads / num_key_value_heads / max_position_embeddings,
# RoPE from cos/sin tables sliced at the cached length, GQA through repeat_kv, SwiGLU, the head tied to the embedding,
# forward(input_ids, attention_mask=None, past_key_values=None, use_cache=False) returning an output object; no
# transformers import here (the real file subclasses PreTrainedModel).
#   MiniMindLM          correct (after f5374dc "[fix] model attn_mask"): the flash path only for an all-ones mask, the
#                       padded batch through the explicit path whose additive mask is (1 - mask) * -1e9.
#   MiniMindFlashMask   real bug, minimind before f5374dc: with any pad in the batch the flash path builds its additive
#                       mask as (1.0 - mask) * float("-inf"), and a kept token gives 0 * -inf = NaN: every row's logits
#                       are NaN. The doctor's padding probe compared NaN with NaN (never "different") and said
#                       "passed".
import math

import torch
import torch.nn.functional as F
from torch import nn


class MiniMindConfig:
    model_type = "minimind"

    def __init__(self, hidden_size=512, num_attention_heads=8, num_key_value_heads=2, num_hidden_layers=8,
                 vocab_size=6400, max_position_embeddings=32768, rms_norm_eps=1e-5, rope_theta=1e6, flash_attn=True,
                 intermediate_size=None, dropout=0.0):
        self.hidden_size = hidden_size
        self.num_attention_heads = num_attention_heads
        self.num_key_value_heads = num_key_value_heads
        self.num_hidden_layers = num_hidden_layers
        self.vocab_size = vocab_size
        self.max_position_embeddings = max_position_embeddings
        self.rms_norm_eps = rms_norm_eps
        self.rope_theta = rope_theta
        self.flash_attn = flash_attn
        self.intermediate_size = intermediate_size
        self.dropout = dropout


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return self.weight * (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x)


def rope_cos_sin(dim, end, base=1e6):
    inv = 1.0 / (base ** (torch.arange(0, dim, 2)[: dim // 2].float() / dim))
    angles = torch.outer(torch.arange(end).float(), inv)
    return torch.cat([angles.cos(), angles.cos()], dim=-1), torch.cat([angles.sin(), angles.sin()], dim=-1)


def rotate(q, k, cos, sin):
    def half(x):
        return torch.cat((-x[..., x.shape[-1] // 2:], x[..., : x.shape[-1] // 2]), dim=-1)

    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return q * cos + half(q) * sin, k * cos + half(k) * sin


def repeat_kv(x, n_rep):
    b, t, n_kv, d = x.shape
    return x if n_rep == 1 else x[:, :, :, None, :].expand(b, t, n_kv, n_rep, d).reshape(b, t, n_kv * n_rep, d)


class Attention(nn.Module):
    nan_mask = False

    def __init__(self, config):
        super().__init__()
        self.n_heads = config.num_attention_heads
        self.n_kv = config.num_key_value_heads or config.num_attention_heads
        self.n_rep = self.n_heads // self.n_kv
        self.head_dim = config.hidden_size // self.n_heads
        self.q_proj = nn.Linear(config.hidden_size, self.n_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(config.hidden_size, self.n_kv * self.head_dim, bias=False)
        self.v_proj = nn.Linear(config.hidden_size, self.n_kv * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.n_heads * self.head_dim, config.hidden_size, bias=False)
        self.flash = hasattr(F, "scaled_dot_product_attention") and config.flash_attn

    def forward(self, x, cos_sin, past_key_value=None, use_cache=False, attention_mask=None):
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.n_heads, self.head_dim)
        k = self.k_proj(x).view(b, t, self.n_kv, self.head_dim)
        v = self.v_proj(x).view(b, t, self.n_kv, self.head_dim)
        q, k = rotate(q, k, cos_sin[0][:t], cos_sin[1][:t])
        # kv_cache：拼上之前缓存的 k、v
        if past_key_value is not None:
            k = torch.cat([past_key_value[0], k], dim=1)
            v = torch.cat([past_key_value[1], v], dim=1)
        present = (k, v) if use_cache else None
        q, k, v = q.transpose(1, 2), repeat_kv(k, self.n_rep).transpose(1, 2), repeat_kv(v, self.n_rep).transpose(1, 2)
        if self.nan_mask and self.flash and t > 1:
            if attention_mask is None or torch.all(attention_mask == 1):
                extra, causal = None, True
            else:
                future = torch.triu(torch.full((t, t), float("-inf")), diagonal=1)
                pads = (1.0 - attention_mask.unsqueeze(1).unsqueeze(2)) * float("-inf")
                extra, causal = future.unsqueeze(0) + pads, False
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=extra, is_causal=causal)
        elif self.flash and t > 1 and (attention_mask is None or torch.all(attention_mask == 1)):
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
            scores = scores + torch.triu(torch.full((t, t), float("-inf")), diagonal=1)[None, None]
            if attention_mask is not None:
                scores = scores + (1.0 - attention_mask.unsqueeze(1).unsqueeze(2)) * -1e9
            out = F.softmax(scores.float(), dim=-1).type_as(q) @ v
        return self.o_proj(out.transpose(1, 2).reshape(b, t, -1)), present


class FeedForward(nn.Module):
    def __init__(self, config):
        super().__init__()
        hidden = config.intermediate_size or 64 * ((int(config.hidden_size * 8 / 3) + 63) // 64)
        self.gate_proj = nn.Linear(config.hidden_size, hidden, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, config.hidden_size, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class MiniMindBlock(nn.Module):
    def __init__(self, config, attention=Attention):
        super().__init__()
        self.self_attn = attention(config)
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = FeedForward(config)

    def forward(self, h, cos_sin, past_key_value=None, use_cache=False, attention_mask=None):
        a, present = self.self_attn(self.input_layernorm(h), cos_sin, past_key_value, use_cache, attention_mask)
        h = h + a
        return h + self.mlp(self.post_attention_layernorm(h)), present


class MiniMindLM(nn.Module):
    attention = Attention

    def __init__(self, config: MiniMindConfig = None):
        super().__init__()
        self.config = config or MiniMindConfig()
        c = self.config
        self.embed_tokens = nn.Embedding(c.vocab_size, c.hidden_size)
        self.layers = nn.ModuleList(MiniMindBlock(c, self.attention) for _ in range(c.num_hidden_layers))
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.lm_head = nn.Linear(c.hidden_size, c.vocab_size, bias=False)
        self.embed_tokens.weight = self.lm_head.weight
        cos, sin = rope_cos_sin(c.hidden_size // c.num_attention_heads, c.max_position_embeddings, c.rope_theta)
        self.register_buffer("freqs_cos", cos, persistent=False)
        self.register_buffer("freqs_sin", sin, persistent=False)

    def forward(self, input_ids, attention_mask=None, past_key_values=None, use_cache=False):
        b, t = input_ids.shape
        past_key_values = past_key_values or [None] * len(self.layers)
        start = past_key_values[0][0].shape[1] if past_key_values[0] is not None else 0
        h = self.embed_tokens(input_ids)
        cos_sin = (self.freqs_cos[start:start + t], self.freqs_sin[start:start + t])
        presents = []
        for layer, past in zip(self.layers, past_key_values):
            h, present = layer(h, cos_sin, past_key_value=past, use_cache=use_cache, attention_mask=attention_mask)
            presents.append(present)
        return {"logits": self.lm_head(self.norm(h)), "past_key_values": presents}


class NaNMaskAttention(Attention):
    nan_mask = True


class MiniMindFlashMask(MiniMindLM):
    attention = NaNMaskAttention
