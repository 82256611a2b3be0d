"""Research code: T5's unscaled attention with a relative position bias, a non-parametric LayerNorm used twice
(OLMo), Conv1d(kernel 1) feed-forward networks (the original TTS / attention-is-all-you-need ports), x-transformers'
masking. Re-typed in our own words from the repositories named above each class. Built as ``CLASS(d_model,
n_heads)``."""

import math

import torch
import torch.nn.functional as F
from torch import nn


# follows huggingface/transformers models/t5/modeling_t5.py (T5LayerNorm): RMS, variance computed in float32,
# no bias and no mean subtraction
class T5LayerNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        variance = hidden_states.to(torch.float32).pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states


def relative_position_bucket(relative_position, num_buckets=32, max_distance=128):
    """T5's bidirectional bucketing: half the buckets per direction, small distances exact, larger ones log-spaced."""
    num_buckets //= 2
    ret = (relative_position > 0).to(torch.long) * num_buckets
    n = torch.abs(relative_position)
    max_exact = num_buckets // 2
    is_small = n < max_exact
    val_if_large = max_exact + (torch.log(n.float() / max_exact + 1e-6) / math.log(max_distance / max_exact)
                                * (num_buckets - max_exact)).to(torch.long)
    val_if_large = torch.min(val_if_large, torch.full_like(val_if_large, num_buckets - 1))
    return ret + torch.where(is_small, n, val_if_large)


# follows modeling_t5.py (T5Attention, encoder self-attention): q/k/v/o without bias, NO 1/sqrt(d_kv) (folded into
# the initialisation by design), a learned relative position bias (B, H, T, S) added to the scores
class T5Attention(nn.Module):
    def __init__(self, d_model, n_heads, num_buckets=32):
        super().__init__()
        self.n_heads = n_heads
        self.key_value_proj_dim = d_model // n_heads
        self.inner_dim = n_heads * self.key_value_proj_dim
        self.num_buckets = num_buckets
        self.q = nn.Linear(d_model, self.inner_dim, bias=False)
        self.k = nn.Linear(d_model, self.inner_dim, bias=False)
        self.v = nn.Linear(d_model, self.inner_dim, bias=False)
        self.o = nn.Linear(self.inner_dim, d_model, bias=False)
        self.relative_attention_bias = nn.Embedding(num_buckets, n_heads)

    def compute_bias(self, query_length, key_length):
        context_position = torch.arange(query_length, dtype=torch.long)[:, None]
        memory_position = torch.arange(key_length, dtype=torch.long)[None, :]
        buckets = relative_position_bucket(memory_position - context_position, self.num_buckets)
        values = self.relative_attention_bias(buckets)  # (T, S, H)
        return values.permute([2, 0, 1]).unsqueeze(0)  # (1, H, T, S)

    def forward(self, hidden_states, mask=None):
        batch_size, seq_length = hidden_states.shape[:2]

        def shape(states):
            return states.view(batch_size, -1, self.n_heads, self.key_value_proj_dim).transpose(1, 2)

        query_states = shape(self.q(hidden_states))
        key_states = shape(self.k(hidden_states))
        value_states = shape(self.v(hidden_states))
        scores = torch.matmul(query_states, key_states.transpose(3, 2))
        position_bias = self.compute_bias(seq_length, seq_length)
        if mask is not None:
            position_bias = position_bias + mask  # (B, 1, 1, S) additive
        scores += position_bias
        attn_weights = F.softmax(scores.float(), dim=-1).type_as(scores)
        attn_output = torch.matmul(attn_weights, value_states)
        attn_output = attn_output.transpose(1, 2).contiguous().view(batch_size, -1, self.inner_dim)
        return self.o(attn_output)


class T5DenseReluDense(nn.Module):
    def __init__(self, d_model, d_ff):
        super().__init__()
        self.wi = nn.Linear(d_model, d_ff, bias=False)
        self.wo = nn.Linear(d_ff, d_model, bias=False)

    def forward(self, hidden_states):
        return self.wo(F.relu(self.wi(hidden_states)))


# follows modeling_t5.py (T5Block = T5LayerSelfAttention + T5LayerFF): pre-norm with T5LayerNorm
class T5Block(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.SelfAttention = T5Attention(d_model, n_heads)
        self.layer_norm_attn = T5LayerNorm(d_model)
        self.DenseReluDense = T5DenseReluDense(d_model, 4 * d_model)
        self.layer_norm_ff = T5LayerNorm(d_model)

    def forward(self, hidden_states, mask=None):
        hidden_states = hidden_states + self.SelfAttention(self.layer_norm_attn(hidden_states), mask)
        return hidden_states + self.DenseReluDense(self.layer_norm_ff(hidden_states))


class SimpleAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads = n_heads
        self.c_attn = nn.Linear(d_model, 3 * d_model)
        self.c_proj = nn.Linear(d_model, d_model)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (z.view(B, T, self.n_heads, C // self.n_heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v)
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


# follows allenai/OLMo olmo/model.py (LayerNorm with elementwise_affine off, OLMo-1): F.layer_norm with no
# weight and no bias, two instances, identical by construction
class NonParametricLayerNorm(nn.Module):
    def __init__(self, size, eps=1e-5):
        super().__init__()
        self.normalized_shape = (size,)
        self.eps = eps

    def forward(self, x):
        return F.layer_norm(x, self.normalized_shape, weight=None, bias=None, eps=self.eps)


class OlmoBlock(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.attn_norm = NonParametricLayerNorm(d_model)
        self.attn = SimpleAttention(d_model, n_heads)
        self.ff_norm = NonParametricLayerNorm(d_model)
        self.ff = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))

    def forward(self, x):
        x = x + self.attn(self.attn_norm(x))
        return x + self.ff(self.ff_norm(x))


# the same design written with the functional call in the block itself: F.layer_norm(x, (D,)) twice (nothing to
# share: there are no parameters)
class FunctionalNormBlock(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.attn = SimpleAttention(d_model, n_heads)
        self.ff = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))
        self.d_model = d_model

    def forward(self, x):
        x = x + self.attn(F.layer_norm(x, (self.d_model,)))
        return x + self.ff(F.layer_norm(x, (self.d_model,)))


# follows jadore801120/attention-is-all-you-need-pytorch transformer/SubLayers.py (early version): the attention
# holds its own residual and LayerNorm; forward(q, k, v, mask=None) with mask (B, 1, S), 0 = pad, -1e9 fill;
# temperature d_k ** 0.5
class JadoreMultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_head):
        super().__init__()
        self.n_head = n_head
        self.d_k = self.d_v = d_model // n_head
        self.w_qs = nn.Linear(d_model, n_head * self.d_k, bias=False)
        self.w_ks = nn.Linear(d_model, n_head * self.d_k, bias=False)
        self.w_vs = nn.Linear(d_model, n_head * self.d_v, bias=False)
        self.fc = nn.Linear(n_head * self.d_v, d_model, bias=False)
        self.temperature = self.d_k ** 0.5
        self.layer_norm = nn.LayerNorm(d_model, eps=1e-6)

    def forward(self, q, k, v, mask=None):
        sz_b, len_q, len_k = q.size(0), q.size(1), k.size(1)
        residual = q
        q = self.w_qs(q).view(sz_b, len_q, self.n_head, self.d_k).transpose(1, 2)  # (B, H, T, Dk)
        k = self.w_ks(k).view(sz_b, len_k, self.n_head, self.d_k).transpose(1, 2)
        v = self.w_vs(v).view(sz_b, len_k, self.n_head, self.d_v).transpose(1, 2)
        if mask is not None:
            mask = mask.unsqueeze(1)  # (B, 1, 1, S)
        attn = torch.matmul(q / self.temperature, k.transpose(2, 3))
        if mask is not None:
            attn = attn.masked_fill(mask == 0, -1e9)
        attn = F.softmax(attn, dim=-1)
        out = torch.matmul(attn, v).transpose(1, 2).contiguous().view(sz_b, len_q, -1)
        out = self.fc(out) + residual
        return self.layer_norm(out), attn


# follows the same repository's first PositionwiseFeedForward: two Conv1d(kernel_size=1) on (B, D, T)
class ConvFeedForward(nn.Module):
    def __init__(self, d_in, d_hid):
        super().__init__()
        self.w_1 = nn.Conv1d(d_in, d_hid, 1)
        self.w_2 = nn.Conv1d(d_hid, d_in, 1)
        self.layer_norm = nn.LayerNorm(d_in, eps=1e-6)

    def forward(self, x):
        residual = x
        output = x.transpose(1, 2)  # (B, D, T)
        output = self.w_2(F.relu(self.w_1(output)))
        output = output.transpose(1, 2)  # (B, T, D)
        return self.layer_norm(output + residual)


class JadoreEncoderLayer(nn.Module):
    def __init__(self, d_model, n_head):
        super().__init__()
        self.slf_attn = JadoreMultiHeadAttention(d_model, n_head)
        self.pos_ffn = ConvFeedForward(d_model, 4 * d_model)

    def forward(self, enc_input, slf_attn_mask=None):
        enc_output, _ = self.slf_attn(enc_input, enc_input, enc_input, mask=slf_attn_mask)
        return self.pos_ffn(enc_output)


# injected into the Conv1d FFN: the residual forgotten, the output normalised without + residual
class ConvFeedForwardNoResidual(ConvFeedForward):
    def forward(self, x):
        output = self.w_2(F.relu(self.w_1(x.transpose(1, 2)))).transpose(1, 2)
        return self.layer_norm(output)


class JadoreEncoderLayerNoFFResidual(JadoreEncoderLayer):
    def __init__(self, d_model, n_head):
        super().__init__(d_model, n_head)
        self.pos_ffn = ConvFeedForwardNoResidual(d_model, 4 * d_model)


# follows lucidrains/x-transformers x_transformers/x_transformers.py (Attention): (B, S) bool mask, True = keep,
# filled with -finfo.max after `~mask`
class XAttention(nn.Module):
    def __init__(self, dim, heads=8):
        super().__init__()
        dim_head = dim // heads
        self.heads = heads
        self.scale = dim_head ** -0.5
        self.to_q = nn.Linear(dim, dim, bias=False)
        self.to_k = nn.Linear(dim, dim, bias=False)
        self.to_v = nn.Linear(dim, dim, bias=False)
        self.to_out = nn.Linear(dim, dim, bias=False)

    def forward(self, x, context=None, mask=None):
        b, n, _ = x.shape
        kv_input = x if context is None else context
        q, k, v = self.to_q(x), self.to_k(kv_input), self.to_v(kv_input)
        q, k, v = (t.reshape(b, -1, self.heads, t.shape[-1] // self.heads).transpose(1, 2) for t in (q, k, v))
        dots = torch.einsum("bhid,bhjd->bhij", q, k) * self.scale
        if mask is not None:
            max_neg_value = -torch.finfo(dots.dtype).max
            dots = dots.masked_fill(~mask[:, None, None, :], max_neg_value)
        attn = dots.softmax(dim=-1)
        out = torch.einsum("bhij,bhjd->bhid", attn, v)
        out = out.transpose(1, 2).reshape(b, n, -1)  # (B, T, D)
        return self.to_out(out)
