# Re-typed after Lightning-AI/lit-gpt (litgpt) model.py + config.py: a Config dataclass (block_size, vocab_size,
# padded_vocab_size rounded up to padding_multiple, n_layer, n_head, n_embd, rotary_percentage, parallel_residual,
# bias, norm_class_name "RMSNorm", mlp "LLaMAMLP"), rope_cache built once for max_seq_length and sliced by input_pos,
# a causal mask built once in forward and handed to every Block, SDPA with an explicit mask, ln_f, an untied lm_head
# of padded_vocab_size (logits wider than vocab_size: the padding rows are never a target).
#   GPT                 as the library builds it.
#   GPTMaskFirstLayer   injected: the mask handed to the first block only (`mask if i == 0 else None`) -- the
#                       later blocks fall back to SDPA without a mask, i.e. they attend to the future.
import math
from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class Config:
    name: str = ""
    block_size: int = 4096
    vocab_size: int = 50254
    padding_multiple: int = 512
    padded_vocab_size: Optional[int] = None
    n_layer: int = 16
    n_head: int = 32
    n_embd: int = 4096
    rotary_percentage: float = 1.0
    parallel_residual: bool = False
    bias: bool = False
    norm_eps: float = 1e-5
    intermediate_size: Optional[int] = None

    def __post_init__(self):
        if self.padded_vocab_size is None:
            self.padded_vocab_size = self.padding_multiple * math.ceil(self.vocab_size / self.padding_multiple)
        if self.intermediate_size is None:
            self.intermediate_size = 4 * self.n_embd
        self.head_size = self.n_embd // self.n_head
        self.rope_n_elem = int(self.rotary_percentage * self.head_size)


class RMSNorm(torch.nn.Module):
    def __init__(self, size: int, dim: int = -1, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(size))
        self.eps = eps
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.float()
        norm_x = torch.mean(x * x, dim=self.dim, keepdim=True)
        x_normed = x * torch.rsqrt(norm_x + self.eps)
        return (self.weight * x_normed).to(dtype=dtype)


def build_rope_cache(seq_len: int, n_elem: int, base: int = 10000):
    theta = 1.0 / (base ** (torch.arange(0, n_elem, 2).float() / n_elem))
    seq_idx = torch.arange(seq_len)
    idx_theta = torch.outer(seq_idx, theta).repeat(1, 2)
    return torch.cos(idx_theta), torch.sin(idx_theta)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    head_size = x.size(-1)
    x1 = x[..., : head_size // 2]
    x2 = x[..., head_size // 2:]
    rotated = torch.cat((-x2, x1), dim=-1)
    roped = (x * cos) + (rotated * sin)
    return roped.to(dtype=x.dtype)


class CausalSelfAttention(nn.Module):
    def __init__(self, config: Config) -> None:
        super().__init__()
        shape = 3 * config.n_head * config.head_size
        self.attn = nn.Linear(config.n_embd, shape, bias=config.bias)
        self.proj = nn.Linear(config.n_head * config.head_size, config.n_embd, bias=config.bias)
        self.config = config

    def forward(self, x, cos, sin, mask=None):
        B, T, C = x.size()
        qkv = self.attn(x)
        qkv = qkv.view(B, T, self.config.n_head, 3, self.config.head_size)
        qkv = qkv.permute(0, 2, 3, 1, 4)  # (B, n_head, 3, T, hs)
        q, k, v = qkv.unbind(dim=2)
        n_elem = self.config.rope_n_elem
        q_roped = apply_rope(q[..., :n_elem], cos, sin)
        k_roped = apply_rope(k[..., :n_elem], cos, sin)
        q = torch.cat((q_roped, q[..., n_elem:]), dim=-1)
        k = torch.cat((k_roped, k[..., n_elem:]), dim=-1)
        scale = 1.0 / math.sqrt(self.config.head_size)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=0.0, scale=scale, is_causal=False)
        y = y.transpose(1, 2).reshape(B, T, self.config.head_size * self.config.n_head)
        return self.proj(y)


class LLaMAMLP(nn.Module):
    def __init__(self, config: Config) -> None:
        super().__init__()
        self.fc_1 = nn.Linear(config.n_embd, config.intermediate_size, bias=config.bias)
        self.fc_2 = nn.Linear(config.n_embd, config.intermediate_size, bias=config.bias)
        self.proj = nn.Linear(config.intermediate_size, config.n_embd, bias=config.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(F.silu(self.fc_1(x)) * self.fc_2(x))


class Block(nn.Module):
    def __init__(self, config: Config) -> None:
        super().__init__()
        self.norm_1 = RMSNorm(config.n_embd, eps=config.norm_eps)
        self.attn = CausalSelfAttention(config)
        self.norm_2 = None if config.parallel_residual else RMSNorm(config.n_embd, eps=config.norm_eps)
        self.mlp = LLaMAMLP(config)
        self.config = config

    def forward(self, x, cos, sin, mask=None):
        n_1 = self.norm_1(x)
        h = self.attn(n_1, cos, sin, mask)
        if self.config.parallel_residual:
            return self.mlp(n_1) + h + x
        x = h + x
        return self.mlp(self.norm_2(x)) + x


class GPT(nn.Module):
    def __init__(self, config: Config) -> None:
        super().__init__()
        assert config.padded_vocab_size is not None
        self.config = config
        self.lm_head = nn.Linear(config.n_embd, config.padded_vocab_size, bias=False)
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(config.padded_vocab_size, config.n_embd),
            h=nn.ModuleList(Block(config) for _ in range(config.n_layer)),
            ln_f=RMSNorm(config.n_embd, eps=config.norm_eps),
        ))
        cos, sin = build_rope_cache(config.block_size, config.rope_n_elem)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def causal_mask(self, T, device):
        # True = take part in attention (SDPA's boolean convention)
        return torch.ones(T, T, dtype=torch.bool, device=device).tril()

    def run_blocks(self, x, cos, sin, mask):
        for block in self.transformer.h:
            x = block(x, cos, sin, mask)
        return x

    def forward(self, idx: torch.Tensor, input_pos: Optional[torch.Tensor] = None) -> torch.Tensor:
        T = idx.size(1)
        if self.config.block_size < T:
            raise ValueError(f"Cannot forward sequence of length {T}, max seq length is only {self.config.block_size}.")
        cos = self.cos[:T]
        sin = self.sin[:T]
        mask = self.causal_mask(T, idx.device)
        x = self.transformer.wte(idx)
        x = self.run_blocks(x, cos, sin, mask)
        x = self.transformer.ln_f(x)
        return self.lm_head(x)


class GPTMaskFirstLayer(GPT):
    def run_blocks(self, x, cos, sin, mask):
        for i, block in enumerate(self.transformer.h):
            x = block(x, cos, sin, mask if i == 0 else None)
        return x
