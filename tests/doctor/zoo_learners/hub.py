"""Styles from library code learners copy: a BERT layer (BertSelfAttention / BertSelfOutput with LayerNorm eps
1e-12 inside each sub-layer, additive (B, 1, 1, S) mask, GELU), GPT-2's Conv1D (weights stored (in, out)),
F.scaled_dot_product_attention, lucidrains' Residual(PreNorm(fn)) wrappers, torch's own nn.TransformerEncoderLayer.
Built as CLASS(d_model, n_heads)."""

import math

import torch
import torch.nn.functional as F
from torch import nn


class BertSelfAttention(nn.Module):
    def __init__(self, hidden_size, num_attention_heads):
        super().__init__()
        self.num_attention_heads = num_attention_heads
        self.attention_head_size = hidden_size // num_attention_heads
        self.all_head_size = self.num_attention_heads * self.attention_head_size
        self.query = nn.Linear(hidden_size, self.all_head_size)
        self.key = nn.Linear(hidden_size, self.all_head_size)
        self.value = nn.Linear(hidden_size, self.all_head_size)

    def transpose_for_scores(self, x):
        new_x_shape = x.size()[:-1] + (self.num_attention_heads, self.attention_head_size)
        x = x.view(new_x_shape)
        return x.permute(0, 2, 1, 3)

    def forward(self, hidden_states, attention_mask=None):
        query_layer = self.transpose_for_scores(self.query(hidden_states))
        key_layer = self.transpose_for_scores(self.key(hidden_states))
        value_layer = self.transpose_for_scores(self.value(hidden_states))
        attention_scores = torch.matmul(query_layer, key_layer.transpose(-1, -2))
        attention_scores = attention_scores / math.sqrt(self.attention_head_size)
        if attention_mask is not None:
            attention_scores = attention_scores + attention_mask
        attention_probs = nn.functional.softmax(attention_scores, dim=-1)
        context_layer = torch.matmul(attention_probs, value_layer)
        context_layer = context_layer.permute(0, 2, 1, 3).contiguous()
        new_context_layer_shape = context_layer.size()[:-2] + (self.all_head_size,)
        return (context_layer.view(new_context_layer_shape),)


class BertSelfOutput(nn.Module):
    def __init__(self, hidden_size):
        super().__init__()
        self.dense = nn.Linear(hidden_size, hidden_size)
        self.LayerNorm = nn.LayerNorm(hidden_size, eps=1e-12)
        self.dropout = nn.Dropout(0.1)

    def forward(self, hidden_states, input_tensor):
        hidden_states = self.dropout(self.dense(hidden_states))
        return self.LayerNorm(hidden_states + input_tensor)


class BertAttention(nn.Module):
    def __init__(self, hidden_size, heads):
        super().__init__()
        self.self = BertSelfAttention(hidden_size, heads)
        self.output = BertSelfOutput(hidden_size)

    def forward(self, hidden_states, attention_mask=None):
        self_outputs = self.self(hidden_states, attention_mask)
        return (self.output(self_outputs[0], hidden_states),)


class BertIntermediate(nn.Module):
    def __init__(self, hidden_size):
        super().__init__()
        self.dense = nn.Linear(hidden_size, 4 * hidden_size)

    def forward(self, hidden_states):
        return F.gelu(self.dense(hidden_states))


class BertOutput(nn.Module):
    def __init__(self, hidden_size):
        super().__init__()
        self.dense = nn.Linear(4 * hidden_size, hidden_size)
        self.LayerNorm = nn.LayerNorm(hidden_size, eps=1e-12)
        self.dropout = nn.Dropout(0.1)

    def forward(self, hidden_states, input_tensor):
        return self.LayerNorm(self.dropout(self.dense(hidden_states)) + input_tensor)


class BertLayer(nn.Module):
    def __init__(self, hidden_size, heads):
        super().__init__()
        self.attention = BertAttention(hidden_size, heads)
        self.intermediate = BertIntermediate(hidden_size)
        self.output = BertOutput(hidden_size)

    def forward(self, hidden_states, attention_mask=None):
        attention_output = self.attention(hidden_states, attention_mask)[0]
        return (self.output(self.intermediate(attention_output), attention_output),)


class Conv1D(nn.Module):
    """GPT-2's Conv1D: a Linear whose weight is stored (in, out)"""

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
    def __init__(self, embed_dim, num_heads, scale_by_embed=False):
        super().__init__()
        self.embed_dim, self.num_heads = embed_dim, num_heads
        self.head_dim = embed_dim // num_heads
        self.c_attn = Conv1D(3 * embed_dim, embed_dim)
        self.c_proj = Conv1D(embed_dim, embed_dim)
        self.scale_by_embed = scale_by_embed

    def _split_heads(self, tensor):
        new_shape = tensor.size()[:-1] + (self.num_heads, self.head_dim)
        return tensor.view(new_shape).permute(0, 2, 1, 3)  # (batch, head, seq_length, head_features)

    def forward(self, hidden_states):
        query, key, value = self.c_attn(hidden_states).split(self.embed_dim, dim=2)
        query, key, value = self._split_heads(query), self._split_heads(key), self._split_heads(value)
        attn_weights = torch.matmul(query, key.transpose(-1, -2))
        attn_weights = attn_weights / (value.size(-1) ** 0.5 if not self.scale_by_embed else self.embed_dim ** 0.5)
        t = query.size(-2)
        causal = torch.tril(torch.ones((t, t), dtype=torch.bool))
        attn_weights = torch.where(causal, attn_weights, torch.finfo(attn_weights.dtype).min)
        attn_weights = nn.functional.softmax(attn_weights, dim=-1)
        attn_output = torch.matmul(attn_weights, value)
        attn_output = attn_output.permute(0, 2, 1, 3).contiguous()
        attn_output = attn_output.view(attn_output.size()[:-2] + (self.embed_dim,))
        return self.c_proj(attn_output), attn_weights


class GPT2AttentionScaledByEmbed(GPT2Attention):
    def __init__(self, embed_dim, num_heads):
        super().__init__(embed_dim, num_heads, scale_by_embed=True)


class SdpaAttention(nn.Module):
    def __init__(self, d_model, n_heads, is_causal=True):
        super().__init__()
        self.n_heads = n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.proj = nn.Linear(d_model, d_model, bias=False)
        self.is_causal = is_causal

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_heads, C // self.n_heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=self.is_causal)
        return self.proj(y.transpose(1, 2).contiguous().view(B, T, C))


class SdpaNoTranspose(SdpaAttention):
    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q, k, v = (t.reshape(B, self.n_heads, T, C // self.n_heads) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=self.is_causal)
        return self.proj(y.transpose(1, 2).contiguous().view(B, T, C))


class Residual(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x, **kwargs):
        return self.fn(x, **kwargs) + x


class PreNorm(nn.Module):
    def __init__(self, dim, fn):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fn = fn

    def forward(self, x, **kwargs):
        return self.fn(self.norm(x), **kwargs)


class FeedForward(nn.Module):
    def __init__(self, dim, hidden_dim):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(dim, hidden_dim), nn.GELU(), nn.Dropout(0.0), nn.Linear(hidden_dim, dim),
                                 nn.Dropout(0.0))

    def forward(self, x):
        return self.net(x)


class LucidAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.scale = (dim // heads) ** -0.5
        self.to_qkv = nn.Linear(dim, dim * 3, bias=False)
        self.to_out = nn.Sequential(nn.Linear(dim, dim), nn.Dropout(0.0))

    def forward(self, x):
        b, n, _ = x.shape
        q, k, v = (t.reshape(b, n, self.heads, -1).transpose(1, 2) for t in self.to_qkv(x).chunk(3, dim=-1))
        attn = (torch.matmul(q, k.transpose(-1, -2)) * self.scale).softmax(dim=-1)
        return self.to_out(torch.matmul(attn, v).transpose(1, 2).reshape(b, n, -1))


class Transformer(nn.Module):
    """one layer of a ViT-style transformer: Residual(PreNorm(Attention)), Residual(PreNorm(FeedForward))"""

    def __init__(self, dim, heads):
        super().__init__()
        self.layers = nn.ModuleList([nn.ModuleList([
            Residual(PreNorm(dim, LucidAttention(dim, heads))),
            Residual(PreNorm(dim, FeedForward(dim, 4 * dim))),
        ])])

    def forward(self, x):
        for attn, ff in self.layers:
            x = attn(x)
            x = ff(x)
        return x


class TransformerNoFFResidual(Transformer):
    def __init__(self, dim, heads):
        super().__init__(dim, heads)
        self.layers[0][1] = PreNorm(dim, FeedForward(dim, 4 * dim))


def torch_encoder_layer(d_model, n_heads):
    return nn.TransformerEncoderLayer(d_model, n_heads, dim_feedforward=4 * d_model, dropout=0.0, batch_first=True)


def torch_encoder_layer_pre(d_model, n_heads):
    return nn.TransformerEncoderLayer(d_model, n_heads, dim_feedforward=4 * d_model, dropout=0.0, batch_first=True,
                                      norm_first=True, activation="gelu")


def torch_encoder_layer_seq_first(d_model, n_heads):
    return nn.TransformerEncoderLayer(d_model, n_heads, dim_feedforward=4 * d_model, dropout=0.0)
