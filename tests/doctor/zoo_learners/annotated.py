"""The style of "The Annotated Transformer": clones(), a hand-written LayerNorm with a_2/b_2 and the unbiased std,
SublayerConnection (residual and norm inside each sub-layer), `linears` = 4 clones, a free `attention` function.

Built by the factories at the bottom as (d_model, n_heads) (the classes take (h, d_model) and (size, self_attn,
feed_forward, dropout)). Masks: (B, 1, S), 0 = padding, as the notebook's `src_mask`.
"""
# ruff: noqa: UP008 - super(Class, self) is the notebook's own style, kept on purpose

import copy
import math

import torch
import torch.nn as nn


def clones(module, N):
    "Produce N identical layers."
    return nn.ModuleList([copy.deepcopy(module) for _ in range(N)])


class LayerNorm(nn.Module):
    "Construct a layernorm module (See citation for details)."

    def __init__(self, features, eps=1e-6):
        super(LayerNorm, self).__init__()
        self.a_2 = nn.Parameter(torch.ones(features))
        self.b_2 = nn.Parameter(torch.zeros(features))
        self.eps = eps

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        std = x.std(-1, keepdim=True)
        return self.a_2 * (x - mean) / (std + self.eps) + self.b_2


class SublayerConnection(nn.Module):
    """
    A residual connection followed by a layer norm.
    Note for code simplicity the norm is first as opposed to last.
    """

    def __init__(self, size, dropout):
        super(SublayerConnection, self).__init__()
        self.norm = LayerNorm(size)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, sublayer):
        "Apply residual connection to any sublayer with the same size."
        return x + self.dropout(sublayer(self.norm(x)))


class SublayerNoResidual(SublayerConnection):
    def forward(self, x, sublayer):
        return self.dropout(sublayer(self.norm(x)))


class SublayerNormedResidual(SublayerConnection):
    def forward(self, x, sublayer):
        x = self.norm(x)
        return x + self.dropout(sublayer(x))


def attention(query, key, value, mask=None, dropout=None):
    "Compute 'Scaled Dot Product Attention'"
    d_k = query.size(-1)
    scores = torch.matmul(query, key.transpose(-2, -1)) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(mask == 0, -1e9)
    p_attn = scores.softmax(dim=-1)
    if dropout is not None:
        p_attn = dropout(p_attn)
    return torch.matmul(p_attn, value), p_attn


def attention_zero_after_softmax(query, key, value, mask=None, dropout=None):
    d_k = query.size(-1)
    scores = torch.matmul(query, key.transpose(-2, -1)) / math.sqrt(d_k)
    p_attn = scores.softmax(dim=-1)
    if mask is not None:
        p_attn = p_attn.masked_fill(mask == 0, 0)
    return torch.matmul(p_attn, value), p_attn


class MultiHeadedAttention(nn.Module):
    def __init__(self, h, d_model, dropout=0.1, attend=attention):
        "Take in model size and number of heads."
        super(MultiHeadedAttention, self).__init__()
        assert d_model % h == 0
        # We assume d_v always equals d_k
        self.d_k = d_model // h
        self.h = h
        self.linears = clones(nn.Linear(d_model, d_model), 4)
        self.attn = None
        self.dropout = nn.Dropout(p=dropout)
        self.attend = attend

    def forward(self, query, key, value, mask=None):
        "Implements Figure 2"
        if mask is not None:
            # Same mask applied to all h heads.
            mask = mask.unsqueeze(1)
        nbatches = query.size(0)

        # 1) Do all the linear projections in batch from d_model => h x d_k
        query, key, value = [
            lin(x).view(nbatches, -1, self.h, self.d_k).transpose(1, 2)
            for lin, x in zip(self.linears, (query, key, value))
        ]

        # 2) Apply attention on all the projected vectors in batch.
        x, self.attn = self.attend(query, key, value, mask=mask, dropout=self.dropout)

        # 3) "Concat" using a view and apply a final linear.
        x = x.transpose(1, 2).contiguous().view(nbatches, -1, self.h * self.d_k)
        del query
        del key
        del value
        return self.linears[-1](x)


class PositionwiseFeedForward(nn.Module):
    "Implements FFN equation."

    def __init__(self, d_model, d_ff, dropout=0.1):
        super(PositionwiseFeedForward, self).__init__()
        self.w_1 = nn.Linear(d_model, d_ff)
        self.w_2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.w_2(self.dropout(self.w_1(x).relu()))


class EncoderLayer(nn.Module):
    "Encoder is made up of self-attn and feed forward (defined below)"

    def __init__(self, size, self_attn, feed_forward, dropout, sublayer=SublayerConnection):
        super(EncoderLayer, self).__init__()
        self.self_attn = self_attn
        self.feed_forward = feed_forward
        self.sublayer = nn.ModuleList([sublayer(size, dropout) for _ in range(2)])
        self.size = size

    def forward(self, x, mask):
        "Follow Figure 1 (left) for connections."
        x = self.sublayer[0](x, lambda x: self.self_attn(x, x, x, mask))
        return self.sublayer[1](x, self.feed_forward)


class EncoderLayerOneSublayer(EncoderLayer):
    """one SublayerConnection (one norm) for both sub-layers"""

    def __init__(self, size, self_attn, feed_forward, dropout):
        super().__init__(size, self_attn, feed_forward, dropout)
        self.sublayer = SublayerConnection(size, dropout)

    def forward(self, x, mask):
        x = self.sublayer(x, lambda x: self.self_attn(x, x, x, mask))
        return self.sublayer(x, self.feed_forward)


def mha(d_model, n_heads):
    return MultiHeadedAttention(n_heads, d_model, dropout=0.0)


def mha_zero_after_softmax(d_model, n_heads):
    return MultiHeadedAttention(n_heads, d_model, dropout=0.0, attend=attention_zero_after_softmax)


def encoder_layer(d_model, n_heads, sublayer=SublayerConnection, cls=EncoderLayer):
    c = copy.deepcopy
    attn = MultiHeadedAttention(n_heads, d_model, dropout=0.0)
    ff = PositionwiseFeedForward(d_model, 4 * d_model, 0.0)
    if cls is EncoderLayer:
        return cls(d_model, c(attn), c(ff), 0.0, sublayer=sublayer)
    return cls(d_model, c(attn), c(ff), 0.0)


def encoder_layer_no_residual(d_model, n_heads):
    return encoder_layer(d_model, n_heads, sublayer=SublayerNoResidual)


def encoder_layer_normed_residual(d_model, n_heads):
    return encoder_layer(d_model, n_heads, sublayer=SublayerNormedResidual)


def encoder_layer_one_sublayer(d_model, n_heads):
    return encoder_layer(d_model, n_heads, cls=EncoderLayerOneSublayer)
