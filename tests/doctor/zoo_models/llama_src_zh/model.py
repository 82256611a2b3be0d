# Re-typed after datawhalechina/base-nlp code/C6/llama2/src/ffn.py and transformer.py (see __init__.py):
# LlamaTransformer(vocab_size, dim, n_layers, n_heads, n_kv_heads, multiple_of, ffn_dim_multiplier, norm_eps,
# max_batch_size, max_seq_len), forward(tokens, start_pos) with start_pos required, a causal mask padded on the left
# by the cached length, logits cast to float. Its pieces come from the package's other files by relative import.
#   LlamaTransformer   correct: refused before the doctor imported a package's module inside its package.
import torch
import torch.nn.functional as F
from torch import nn

from .attention import GroupedQueryAttention
from .norm import RMSNorm
from .rope import rope_table


class SwiGLU(nn.Module):
    def __init__(self, dim, hidden, multiple_of, ffn_dim_multiplier=None):
        super().__init__()
        hidden = int(2 * hidden / 3)
        if ffn_dim_multiplier is not None:
            hidden = int(ffn_dim_multiplier * hidden)
        hidden = multiple_of * ((hidden + multiple_of - 1) // multiple_of)
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Layer(nn.Module):
    def __init__(self, dim, n_heads, n_kv_heads, multiple_of, ffn_dim_multiplier, norm_eps, max_batch_size, max_seq_len):
        super().__init__()
        self.attention = GroupedQueryAttention(dim, n_heads, n_kv_heads, max_batch_size, max_seq_len)
        self.feed_forward = SwiGLU(dim, 4 * dim, multiple_of, ffn_dim_multiplier)
        self.attention_norm = RMSNorm(dim, norm_eps)
        self.ffn_norm = RMSNorm(dim, norm_eps)

    def forward(self, x, start_pos, table, mask):
        h = x + self.attention(self.attention_norm(x), start_pos, table, mask)
        return h + self.feed_forward(self.ffn_norm(h))


class LlamaTransformer(nn.Module):
    def __init__(self, vocab_size, dim, n_layers, n_heads, n_kv_heads=None, multiple_of=256, ffn_dim_multiplier=None,
                 norm_eps=1e-6, max_batch_size=32, max_seq_len=2048):
        super().__init__()
        self.tok_embeddings = nn.Embedding(vocab_size, dim)
        self.layers = nn.ModuleList(
            Layer(dim, n_heads, n_kv_heads, multiple_of, ffn_dim_multiplier, norm_eps, max_batch_size, max_seq_len)
            for _ in range(n_layers)
        )
        self.norm = RMSNorm(dim, eps=norm_eps)
        self.output = nn.Linear(dim, vocab_size, bias=False)
        self.register_buffer("freqs_cis", rope_table(dim // n_heads, max_seq_len * 2), persistent=False)

    def forward(self, tokens, start_pos):
        b, t = tokens.shape
        h = self.tok_embeddings(tokens)
        table = self.freqs_cis[start_pos : start_pos + t]
        mask = None
        if t > 1:
            mask = torch.triu(torch.full((t, t), float("-inf")), diagonal=1)
            mask = torch.hstack([torch.zeros((t, start_pos)), mask]).type_as(h)
        for layer in self.layers:
            h = layer(h, start_pos, table, mask)
        return self.output(self.norm(h)).float()
