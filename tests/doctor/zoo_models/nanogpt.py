# Re-typed after karpathy/nanoGPT model.py (GPTConfig dataclass, transformer ModuleDict wte/wpe/h/ln_f, the lm_head
# tied to wte by assigning the same Parameter, a `bias` tril buffer when scaled_dot_product_attention is off,
# forward(idx, targets) with targets already shifted by get_batch -- without targets only the last position's
# logits (B, 1, V), as nanoGPT's inference shortcut --, generate() reading logits[:, -1, :]).
# Variants:
#   GPTMaskIndexed      injected: `self.bias[:, :, T, :T]` (an index where a slice belongs) -- the same typo is in a
#                       public hand-written T5 file (`attn.masked_fill(self.bias[:,:,T,:T]==0, ...)`): one row of the
#                       tril broadcasts over every query, so no query is masked for T < block_size.
#   GPTTemperatureLate  real bug, transplanted: google/gemma.cpp PR #981 ("fix temperature flag so it takes effect":
#                       the temperature was applied to the exponentiated logits and cancelled by the normalisation);
#                       the same slip was fixed in pytorch/translate PR #508 ("applied the temperature after the
#                       softmax").
#   GPTFlashDropout     real bug: karpathy/nanoGPT before commit 7399dfe ("dont always dropout!", PR #240): the
#                       flash path called scaled_dot_product_attention(..., dropout_p=self.dropout, is_causal=True), and
#                       SDPA drops whenever dropout_p > 0, eval() or not (pytorch/pytorch issue #124464); built with
#                       dropout=0.1 by `tiny_flash_dropout`.
#   GPTFunctionalDropout real bug, transplanted: delip/PyTorchNLPBook issue #28 (`F.dropout(x, p)` keeps dropping in
#                       eval(); should pass training=self.training); built with dropout=0.1 by `tiny_functional_dropout`.
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
from torch.nn import functional as F


@dataclass
class GPTConfig:
    block_size: int = 1024
    vocab_size: int = 50304
    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768
    dropout: float = 0.0
    bias: bool = True


class LayerNorm(nn.Module):
    """LayerNorm with an optional bias (PyTorch's has none to switch off)."""

    def __init__(self, ndim, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def forward(self, input):
        return F.layer_norm(input, self.weight.shape, self.weight, self.bias, 1e-5)


class CausalSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        assert config.n_embd % config.n_head == 0
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.attn_dropout = nn.Dropout(config.dropout)
        self.resid_dropout = nn.Dropout(config.dropout)
        self.n_head = config.n_head
        self.n_embd = config.n_embd
        self.dropout = config.dropout
        # the explicit mask path (the tutorial's; the flash path is the same maths)
        self.register_buffer(
            "bias", torch.tril(torch.ones(config.block_size, config.block_size)).view(1, 1, config.block_size, config.block_size)
        )

    def heads(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        return q, k, v

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.heads(x)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float('-inf'))
        att = F.softmax(att, dim=-1)
        att = self.attn_dropout(att)
        y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    attn_class = CausalSelfAttention

    def __init__(self, config):
        super().__init__()
        self.ln_1 = LayerNorm(config.n_embd, bias=config.bias)
        self.attn = self.attn_class(config)
        self.ln_2 = LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = MLP(config)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return x


class GPT(nn.Module):
    block_class = Block

    def __init__(self, config):
        super().__init__()
        assert config.vocab_size is not None
        assert config.block_size is not None
        self.config = config
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(config.vocab_size, config.n_embd),
            wpe=nn.Embedding(config.block_size, config.n_embd),
            drop=nn.Dropout(config.dropout),
            h=nn.ModuleList([self.block_class(config) for _ in range(config.n_layer)]),
            ln_f=LayerNorm(config.n_embd, bias=config.bias),
        ))
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # weight tying: one Parameter
        self.apply(self._init_weights)
        for pn, p in self.named_parameters():
            if pn.endswith('c_proj.weight'):
                torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets=None):
        device = idx.device
        b, t = idx.size()
        assert t <= self.config.block_size, f"Cannot forward sequence of length {t}, block size is only {self.config.block_size}"
        pos = torch.arange(0, t, dtype=torch.long, device=device)
        tok_emb = self.transformer.wte(idx)
        pos_emb = self.transformer.wpe(pos)
        x = self.transformer.drop(tok_emb + pos_emb)
        for block in self.transformer.h:
            x = block(x)
        x = self.transformer.ln_f(x)
        if targets is not None:
            logits = self.lm_head(x)
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        else:
            # inference-time mini-optimization: only forward the lm_head on the very last position
            logits = self.lm_head(x[:, [-1], :])  # note: using list [-1] to preserve the time dim
            loss = None
        return logits, loss

    def next_token(self, logits, temperature, top_k):
        logits = logits[:, -1, :] / temperature
        if top_k is not None:
            v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
            logits[logits < v[:, [-1]]] = -float('Inf')
        probs = F.softmax(logits, dim=-1)
        return torch.multinomial(probs, num_samples=1)

    @torch.no_grad()
    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None):
        for _ in range(max_new_tokens):
            idx_cond = idx if idx.size(1) <= self.config.block_size else idx[:, -self.config.block_size:]
            logits, _ = self(idx_cond)
            idx_next = self.next_token(logits, temperature, top_k)
            idx = torch.cat((idx, idx_next), dim=1)
        return idx


# --- injected: the mask indexed instead of sliced -----------------------------------------------------------------
class AttentionMaskIndexed(CausalSelfAttention):
    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.heads(x)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, T, :T] == 0, float('-inf'))
        att = F.softmax(att, dim=-1)
        y = self.attn_dropout(att) @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class BlockMaskIndexed(Block):
    attn_class = AttentionMaskIndexed


class GPTMaskIndexed(GPT):
    block_class = BlockMaskIndexed


# --- real (gemma.cpp #981, pytorch/translate #508): the temperature after the softmax -----------------------------
class GPTTemperatureLate(GPT):
    def next_token(self, logits, temperature, top_k):
        logits = logits[:, -1, :]
        if top_k is not None:
            v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
            logits[logits < v[:, [-1]]] = -float('Inf')
        probs = F.softmax(logits, dim=-1) / temperature
        return torch.multinomial(probs, num_samples=1)


# --- real (PyTorchNLPBook #28), transplanted: functional dropout without training=self.training ---------------------
class MLPFunctionalDropout(MLP):
    def forward(self, x):
        x = self.c_proj(self.gelu(self.c_fc(x)))
        return F.dropout(x, p=self.dropout.p)


class BlockFunctionalDropout(Block):
    def __init__(self, config):
        super().__init__(config)
        self.mlp = MLPFunctionalDropout(config)


class GPTFunctionalDropout(GPT):
    block_class = BlockFunctionalDropout


def tiny_functional_dropout():
    return GPTFunctionalDropout(GPTConfig(block_size=16, vocab_size=50, n_layer=2, n_head=2, n_embd=16, dropout=0.1))


# --- real (nanoGPT 7399dfe, PR #240): SDPA's dropout_p passed in eval() too ---------------------------------------------
class AttentionFlashDropout(CausalSelfAttention):
    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.heads(x)
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=self.dropout, is_causal=True)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class BlockFlashDropout(Block):
    attn_class = AttentionFlashDropout


class GPTFlashDropout(GPT):
    block_class = BlockFlashDropout


def tiny_flash_dropout():
    return GPTFlashDropout(GPTConfig(block_size=16, vocab_size=50, n_layer=2, n_head=2, n_embd=16, dropout=0.1))
