# Re-typed after karpathy/llm.c train_llama3.py (at f1e2ace), the PyTorch reference for llm.c's Llama 3.1: a
# LlamaConfig dataclass whose own __init__(**kwargs) keeps only the names it knows (multiple_of=1024 and
# ffn_dim_multiplier=1.3 round the SwiGLU width up), RMSNorm computed on x.float(), rotary positions as complex64
# freqs_cis (Llama 3.1's frequency scaling) applied on xq.float() and cast back with type_as, grouped-query attention
# through one c_attn projection and repeat_kv, a KV cache held as plain float32 tensors and used whenever the model is
# in eval() (start_pos=0 for a full forward), a bool triu mask filled with finfo.min, softmax on scores.float(); the
# loss ignore_index=-1 with targets shifted by the data loader, and without targets only the last position's logits
# (B, 1, V), returned as (logits, loss).
#   LLaMA   correct. Its float32 KV cache (plain tensors, which module.double() leaves alone) met float64 queries:
#           refused ("expected scalar type Double but found Float") until the doctor reran such ops in float64; and
#           with multiple_of left at 1024 its FFN read 64 x d_model at the doctor's sizes.
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class LlamaConfig:
    block_size: int = 8192
    vocab_size: int = 128256
    n_layer: int = 32
    n_head: int = 32
    n_kv_head: int = 8
    n_embd: int = 4096
    ffn_dim_multiplier: float = 1.3
    multiple_of: int = 1024
    norm_eps: float = 1e-5
    rope_theta: float = 500000.0
    use_scaled_rope: bool = True
    max_gen_batch_size: int = 4
    use_kv: bool = True

    def __init__(self, **kwargs):
        for key, value in kwargs.items():
            if hasattr(self, key):
                setattr(self, key, value)
        assert self.n_head % self.n_kv_head == 0 and self.n_embd % self.n_head == 0


def scaled_frequencies(freqs):  # Llama 3.1: long wavelengths slowed down, a smooth band in between
    factor, low, high, old_len = 8, 1, 4, 8192
    out = []
    for f in freqs:
        wavelen = 2 * math.pi / f
        if wavelen < old_len / high:
            out.append(f)
        elif wavelen > old_len / low:
            out.append(f / factor)
        else:
            smooth = (old_len / wavelen - low) / (high - low)
            out.append((1 - smooth) * f / factor + smooth * f)
    return torch.tensor(out, dtype=freqs.dtype)


def rotary_table(dim, end, theta, scaled):
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: dim // 2].float() / dim))
    if scaled:
        freqs = scaled_frequencies(freqs)
    angles = torch.outer(torch.arange(end, dtype=torch.float32), freqs)
    return torch.polar(torch.ones_like(angles), angles)  # complex64


def rotate(xq, xk, freqs_cis):
    q = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    k = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
    f = freqs_cis.view(1, q.shape[1], 1, q.shape[-1])
    return torch.view_as_real(q * f).flatten(3).type_as(xq), torch.view_as_real(k * f).flatten(3).type_as(xk)


def repeat_kv(x, n_rep):
    b, t, h, d = x.shape
    return x if n_rep == 1 else x[:, :, :, None, :].expand(b, t, h, n_rep, d).reshape(b, t, h * n_rep, d)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x) * self.weight


class Attention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.n_head, self.n_kv_head = config.n_head, config.n_kv_head
        self.hd = config.n_embd // config.n_head
        self.c_attn = nn.Linear(config.n_embd, (config.n_head + 2 * config.n_kv_head) * self.hd, bias=False)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=False)
        self.use_kv = config.use_kv
        if self.use_kv:
            shape = (config.max_gen_batch_size, config.block_size, config.n_kv_head, self.hd)
            self.cache_k, self.cache_v = torch.zeros(shape), torch.zeros(shape)

    def forward(self, x, freqs_cis, start_pos, mask):
        B, T, C = x.shape
        sizes = [self.n_head * self.hd, self.n_kv_head * self.hd, self.n_kv_head * self.hd]
        q, k, v = (t.view(B, T, -1, self.hd) for t in self.c_attn(x).split(sizes, dim=-1))
        q, k = rotate(q, k, freqs_cis)
        if self.use_kv and not self.training and start_pos >= 0:
            self.cache_k[:B, start_pos:start_pos + T] = k
            self.cache_v[:B, start_pos:start_pos + T] = v
            k, v = self.cache_k[:B, :start_pos + T], self.cache_v[:B, :start_pos + T]
        rep = self.n_head // self.n_kv_head
        q, k, v = (t.transpose(1, 2) for t in (q, repeat_kv(k, rep), repeat_kv(v, rep)))
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.hd)
        if mask is not None:
            scores.masked_fill_(mask, torch.finfo(scores.dtype).min)
        att = F.softmax(scores.float(), dim=-1).type_as(q)
        return self.c_proj((att @ v).transpose(1, 2).contiguous().view(B, T, C))


class SwiGLU(nn.Module):
    def __init__(self, config):
        super().__init__()
        hidden = int(2 * 4 * config.n_embd / 3)
        if config.ffn_dim_multiplier is not None:
            hidden = int(config.ffn_dim_multiplier * hidden)
        hidden = config.multiple_of * ((hidden + config.multiple_of - 1) // config.multiple_of)
        self.c_fc = nn.Linear(config.n_embd, hidden, bias=False)
        self.c_fc2 = nn.Linear(config.n_embd, hidden, bias=False)
        self.c_proj = nn.Linear(hidden, config.n_embd, bias=False)

    def forward(self, x):
        return self.c_proj(self.c_fc(x) * F.silu(self.c_fc2(x)))


class Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.ln_1, self.ln_2 = RMSNorm(config.n_embd, config.norm_eps), RMSNorm(config.n_embd, config.norm_eps)
        self.attn, self.mlp = Attention(config), SwiGLU(config)

    def forward(self, x, freqs_cis=None, start_pos=None, mask=None):
        x = x + self.attn(self.ln_1(x), freqs_cis, start_pos, mask)
        return x + self.mlp(self.ln_2(x))


class LLaMA(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(config.vocab_size, config.n_embd),
            h=nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
            ln_f=RMSNorm(config.n_embd, config.norm_eps),
        ))
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.freqs_cis = rotary_table(config.n_embd // config.n_head, config.block_size * 2, config.rope_theta,
                                      config.use_scaled_rope)

    def forward(self, idx, targets=None, return_logits=True, start_pos=0):
        t = idx.shape[1]
        assert t <= self.config.block_size
        x = self.transformer.wte(idx)
        freqs_cis = self.freqs_cis[start_pos:start_pos + t]
        mask = torch.triu(torch.ones((t, t), dtype=torch.bool), diagonal=1)
        for block in self.transformer.h:
            x = block(x, freqs_cis, start_pos, mask)
        x = self.transformer.ln_f(x)
        if targets is not None:
            logits = self.lm_head(x).float()
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        else:
            logits = self.lm_head(x[:, [-1], :]).float()
            loss = None
        return (logits if return_logits else None), loss
