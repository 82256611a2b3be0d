# Re-typed after huggingface/transformers src/transformers/models/falcon/modeling_falcon.py (the installed 5.x
# library's FalconForCausalLM with alibi=True, multi_query=True, parallel_attn=True, bias=False): one fused
# projection to the queries and a single shared key and value head (multi-query), attention and MLP both reading the
# same input_layernorm'd x and added to the residual together (parallel, GPT-J style), no position table: an ALiBi
# bias built from the attention mask whose slopes are multiplied in bfloat16 (`slopes[..., None].bfloat16() *
# arange`), labels shifted inside the model, HF-style output object.
#   FalconLM   correct. The bfloat16 island set the doctor's tolerance floor to 300 bfloat16 epsilons (2.3 relative):
#              every shift of the loss then "matched" and the first tried, no shift, was reported as
#              targets_not_shifted (a warning on a correct model).
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class FalconConfig:
    vocab_size: int = 65024
    hidden_size: int = 4544
    num_hidden_layers: int = 32
    num_attention_heads: int = 71
    layer_norm_epsilon: float = 1e-5


def alibi_bias(attention_mask, n_heads, dtype):
    b, t = attention_mask.shape
    closest = 2 ** math.floor(math.log2(n_heads))
    base = torch.tensor(2 ** (-(2 ** -(math.log2(closest) - 3))), dtype=torch.float32)
    slopes = torch.pow(base, torch.arange(1, 1 + closest, dtype=torch.int32))
    if closest != n_heads:
        extra_base = torch.tensor(2 ** (-(2 ** -(math.log2(2 * closest) - 3))), dtype=torch.float32)
        extra = torch.pow(extra_base, torch.arange(1, 1 + 2 * (n_heads - closest), 2, dtype=torch.int32))
        slopes = torch.cat([slopes, extra], dim=0)
    # 位置 = 累计的非 pad 个数 - 1；斜率与位置相乘时用 bfloat16（与原实现一致）
    positions = ((attention_mask.cumsum(dim=-1) - 1) * attention_mask)[:, None, :]
    alibi = slopes[..., None].bfloat16() * positions
    return alibi.reshape(b * n_heads, 1, t).to(dtype)


class Attention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.n_heads = config.num_attention_heads
        self.head_dim = config.hidden_size // self.n_heads
        self.query_key_value = nn.Linear(config.hidden_size, config.hidden_size + 2 * self.head_dim, bias=False)
        self.dense = nn.Linear(config.hidden_size, config.hidden_size, bias=False)

    def forward(self, x, alibi, mask):
        b, t, d = x.shape
        fused = self.query_key_value(x).view(b, t, self.n_heads + 2, self.head_dim)
        q = fused[..., :-2, :].transpose(1, 2).reshape(b * self.n_heads, t, self.head_dim)
        k = fused[..., -2:-1, :].transpose(1, 2).reshape(b, t, self.head_dim)
        v = fused[..., -1:, :].transpose(1, 2).reshape(b, t, self.head_dim)
        scores = (q.view(b, self.n_heads, t, self.head_dim) @ k.unsqueeze(1).transpose(-1, -2))
        scores = scores + alibi.view(b, self.n_heads, 1, t)
        scores = scores / math.sqrt(self.head_dim) + mask
        weights = F.softmax(scores, dim=-1, dtype=x.dtype)
        out = (weights @ v.unsqueeze(1)).transpose(1, 2).reshape(b, t, d)
        return self.dense(out)


class MLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.dense_h_to_4h = nn.Linear(config.hidden_size, 4 * config.hidden_size, bias=False)
        self.dense_4h_to_h = nn.Linear(4 * config.hidden_size, config.hidden_size, bias=False)

    def forward(self, x):
        return self.dense_4h_to_h(F.gelu(self.dense_h_to_4h(x)))


class DecoderLayer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.input_layernorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_epsilon)
        self.self_attention = Attention(config)
        self.mlp = MLP(config)

    def forward(self, x, alibi, mask):
        normed = self.input_layernorm(x)
        return x + self.self_attention(normed, alibi, mask) + self.mlp(normed)


class FalconLM(nn.Module):
    def __init__(self, config: FalconConfig):
        super().__init__()
        self.config = config
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size)
        self.h = nn.ModuleList(DecoderLayer(config) for _ in range(config.num_hidden_layers))
        self.ln_f = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_epsilon)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.lm_head.weight = self.word_embeddings.weight

    def forward(self, input_ids, attention_mask=None, labels=None):
        b, t = input_ids.shape
        if attention_mask is None:
            attention_mask = torch.ones(b, t, dtype=torch.long)
        x = self.word_embeddings(input_ids)
        alibi = alibi_bias(attention_mask, self.config.num_attention_heads, x.dtype)
        blocked = torch.ones(t, t, dtype=torch.bool).triu(1)[None, None] | (attention_mask[:, None, None, :] == 0)
        mask = torch.zeros(b, 1, t, t, dtype=x.dtype).masked_fill(blocked, torch.finfo(x.dtype).min)
        for layer in self.h:
            x = layer(x, alibi, mask)
        logits = self.lm_head(self.ln_f(x))
        loss = None
        if labels is not None:
            shift_logits = logits[..., :-1, :].float().contiguous()
            shift_labels = labels[..., 1:].contiguous()
            loss = F.cross_entropy(shift_logits.view(-1, shift_logits.size(-1)), shift_labels.view(-1))
        return {"loss": loss, "logits": logits}
