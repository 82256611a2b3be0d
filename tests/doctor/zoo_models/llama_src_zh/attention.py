# Re-typed after datawhalechina/base-nlp code/C6/llama2/src/attention.py (see __init__.py): grouped-query attention
# writing k and v into a cache buffer at [start_pos, start_pos + T) and attending over the cache up to there.
import math

import torch
from torch import nn

from .rope import repeat_kv, rotate


class GroupedQueryAttention(nn.Module):
    def __init__(self, dim, n_heads, n_kv_heads=None, max_batch_size=32, max_seq_len=2048):
        super().__init__()
        self.n_heads = n_heads
        self.n_kv_heads = n_kv_heads if n_kv_heads is not None else n_heads
        self.n_rep = self.n_heads // self.n_kv_heads
        self.head_dim = dim // n_heads
        self.wq = nn.Linear(dim, n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(dim, self.n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(dim, self.n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(n_heads * self.head_dim, dim, bias=False)
        shape = (max_batch_size, max_seq_len, self.n_kv_heads, self.head_dim)
        self.register_buffer("cache_k", torch.zeros(shape), persistent=False)
        self.register_buffer("cache_v", torch.zeros(shape), persistent=False)

    def forward(self, x, start_pos, table, mask=None):
        b, t, _ = x.shape
        q = self.wq(x).view(b, t, self.n_heads, self.head_dim)
        k = self.wk(x).view(b, t, self.n_kv_heads, self.head_dim)
        v = self.wv(x).view(b, t, self.n_kv_heads, self.head_dim)
        q, k = rotate(q, k, table)
        # 把当前步的 k、v 写进缓存，再取出到当前位置为止的全部 k、v
        self.cache_k = self.cache_k.to(q)
        self.cache_v = self.cache_v.to(q)
        self.cache_k[:b, start_pos : start_pos + t] = k
        self.cache_v[:b, start_pos : start_pos + t] = v
        keys = repeat_kv(self.cache_k[:b, : start_pos + t], self.n_rep).transpose(1, 2)
        values = repeat_kv(self.cache_v[:b, : start_pos + t], self.n_rep).transpose(1, 2)
        q = q.transpose(1, 2)
        scores = q @ keys.transpose(2, 3) / math.sqrt(self.head_dim)
        if mask is not None:
            scores = scores + mask
        weights = torch.softmax(scores.float(), dim=-1).type_as(q)
        return self.wo((weights @ values).transpose(1, 2).contiguous().view(b, t, -1))
