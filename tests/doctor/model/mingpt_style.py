"""A minGPT-style model, re-typed (the facts of karpathy/minGPT mingpt/model.py at 37baab7, not its text): the
config comes from a static ``get_default_config()`` whose ``model_type`` must be cleared when sizes are given, and
each block reaches its MLP through a closure (``self.mlpf = lambda x: ...``), which a deep copy does not follow.
Correct as written."""

import math

import torch
import torch.nn.functional as F
from torch import nn


class Settings:
    """An attribute bag, like minGPT's CfgNode (its own class name holds neither Config nor Args)."""

    def __init__(self, **kw):
        self.__dict__.update(kw)


class SelfAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.qkv = nn.Linear(cfg.n_embd, 3 * cfg.n_embd)
        self.out = nn.Linear(cfg.n_embd, cfg.n_embd)
        self.heads = cfg.n_head
        self.register_buffer(
            "causal", torch.tril(torch.ones(cfg.block_size, cfg.block_size)).view(1, 1, cfg.block_size, cfg.block_size)
        )

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        w = (q @ k.transpose(-2, -1)) / math.sqrt(c // self.heads)
        w = F.softmax(w.masked_fill(self.causal[:, :, :t, :t] == 0, float("-inf")), dim=-1)
        return self.out((w @ v).transpose(1, 2).contiguous().view(b, t, c))


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.n_embd)
        self.attn = SelfAttention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.n_embd)
        self.mlp = nn.ModuleDict(
            dict(fc=nn.Linear(cfg.n_embd, 4 * cfg.n_embd), proj=nn.Linear(4 * cfg.n_embd, cfg.n_embd))
        )
        m = self.mlp
        self.mlpf = lambda x: m.proj(F.gelu(m.fc(x)))  # the closure holds this block's own ModuleDict

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlpf(self.ln_2(x))


class GPT(nn.Module):
    @staticmethod
    def get_default_config():
        return Settings(model_type="gpt", n_layer=None, n_head=None, n_embd=None, vocab_size=None, block_size=None)

    def __init__(self, config):
        super().__init__()
        assert (config.model_type is not None) != (config.n_layer is not None)
        if config.model_type is not None:
            config.__dict__.update(n_layer=12, n_head=12, n_embd=768)
        self.block_size = config.block_size
        self.transformer = nn.ModuleDict(
            dict(
                wte=nn.Embedding(config.vocab_size, config.n_embd),
                wpe=nn.Embedding(config.block_size, config.n_embd),
                h=nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
                ln_f=nn.LayerNorm(config.n_embd),
            )
        )
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)

    def forward(self, idx, targets=None):
        t = idx.shape[1]
        x = self.transformer.wte(idx) + self.transformer.wpe(torch.arange(t).unsqueeze(0))
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        return logits, loss
