"""More ways learners write attention: the fused kernel with a 5-D qkv unpacked by iteration, GPT-2's Conv1D
(addmm with an (in, out) weight), and LazyLinear projections. Learner style, on purpose."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class FlashStyle(nn.Module):
    def __init__(self, dim, n_heads):
        super().__init__()
        self.n_heads = n_heads
        self.qkv = nn.Linear(dim, dim * 3)
        self.out = nn.Linear(dim, dim)

    def forward(self, x):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.n_heads, C // self.n_heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv  # each (B, heads, N, head_dim)
        x = F.scaled_dot_product_attention(q, k, v)
        x = x.transpose(1, 2).reshape(B, N, C)
        return self.out(x)


class Conv1D(nn.Module):
    """GPT-2's 'Conv1D': a linear layer with the weight stored transposed."""

    def __init__(self, nf, nx):
        super().__init__()
        self.nf = nf
        self.weight = nn.Parameter(torch.randn(nx, nf) * 0.02)
        self.bias = nn.Parameter(torch.zeros(nf))

    def forward(self, x):
        size_out = x.size()[:-1] + (self.nf,)
        x = torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight)
        return x.view(size_out)


class GPT2Attention(nn.Module):
    def __init__(self, embed_dim, num_heads):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.c_attn = Conv1D(3 * embed_dim, embed_dim)
        self.c_proj = Conv1D(embed_dim, embed_dim)

    def _split_heads(self, tensor):
        new_shape = tensor.size()[:-1] + (self.num_heads, self.head_dim)
        return tensor.view(new_shape).permute(0, 2, 1, 3)

    def forward(self, hidden_states):
        query, key, value = self.c_attn(hidden_states).split(self.num_heads * self.head_dim, dim=2)
        query, key, value = self._split_heads(query), self._split_heads(key), self._split_heads(value)
        attn_weights = torch.matmul(query, key.transpose(-1, -2))
        attn_weights = attn_weights / torch.full([], value.size(-1) ** 0.5, dtype=attn_weights.dtype)
        attn_weights = nn.functional.softmax(attn_weights, dim=-1)
        attn_output = torch.matmul(attn_weights, value)
        attn_output = attn_output.permute(0, 2, 1, 3).contiguous()
        attn_output = attn_output.view(attn_output.size()[:-2] + (self.num_heads * self.head_dim,))
        return self.c_proj(attn_output), attn_weights


class LazyAttention(nn.Module):
    def __init__(self, d_model, heads):
        super().__init__()
        self.heads = heads
        self.q = nn.LazyLinear(d_model)
        self.k = nn.LazyLinear(d_model)
        self.v = nn.LazyLinear(d_model)
        self.o = nn.LazyLinear(d_model)

    def forward(self, x):
        b, t, d = x.shape
        q = self.q(x).reshape(b, t, self.heads, -1).transpose(1, 2)
        k = self.k(x).reshape(b, t, self.heads, -1).transpose(1, 2)
        v = self.v(x).reshape(b, t, self.heads, -1).transpose(1, 2)
        w = (q @ k.transpose(-2, -1) * (d // self.heads) ** -0.5).softmax(-1)
        return self.o((w @ v).transpose(1, 2).reshape(b, t, d))


class OneHead(nn.Module):
    def __init__(self, d_model, d_k):
        super().__init__()
        self.W_Q = nn.Linear(d_model, d_k, bias=False)
        self.W_K = nn.Linear(d_model, d_k, bias=False)
        self.W_V = nn.Linear(d_model, d_k, bias=False)

    def forward(self, x):
        Q, K, V = self.W_Q(x), self.W_K(x), self.W_V(x)
        A = torch.softmax(Q @ K.transpose(1, 2) / self.W_Q.out_features ** 0.5, dim=-1)
        return A @ V


class PreallocatedHeads(nn.Module):
    """Each head writes its slice of a tensor allocated up front (a loop over heads, no torch.cat)."""

    def __init__(self, d_model, n_heads):
        super().__init__()
        self.d_k = d_model // n_heads
        self.heads = nn.ModuleList([OneHead(d_model, self.d_k) for _ in range(n_heads)])
        self.W_O = nn.Linear(d_model, d_model)

    def forward(self, x):
        batch, seq, d_model = x.shape
        out = torch.zeros(batch, seq, d_model, dtype=x.dtype)
        for i, head in enumerate(self.heads):
            out[:, :, i * self.d_k:(i + 1) * self.d_k] = head(x)
        return self.W_O(out)
