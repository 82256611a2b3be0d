"""Call contracts found in the wild: q/k/v given under other names and in other orders, masks that are required,
passed third, in the padding sense, or additive in (B, S) / (B, 1, S) / (B, 1, 1, S). Re-typed in our own words from
the repositories named above each class. Built as ``CLASS(d_model, n_heads)``."""

import math

import torch
from torch import nn


# follows aladdinpersson/Machine-Learning-Collection ML/Pytorch/more_advanced/transformer_from_scratch
# (SelfAttention, its later version with full-width Linears): forward(values, keys, query, mask) — the value first,
# the query last; einsum 'nqhd,nkhd->nhqk'; mask (N, 1, 1, S) 0 = pad filled with -1e20; here scaled by head_dim
class AladdinSelfAttention(nn.Module):
    def __init__(self, embed_size, heads):
        super().__init__()
        self.embed_size = embed_size
        self.heads = heads
        self.head_dim = embed_size // heads
        self.values = nn.Linear(embed_size, embed_size)
        self.keys = nn.Linear(embed_size, embed_size)
        self.queries = nn.Linear(embed_size, embed_size)
        self.fc_out = nn.Linear(embed_size, embed_size)

    def scale(self):
        return self.head_dim ** (1 / 2)

    def forward(self, values, keys, query, mask):
        N = query.shape[0]
        value_len, key_len, query_len = values.shape[1], keys.shape[1], query.shape[1]
        values = self.values(values).reshape(N, value_len, self.heads, self.head_dim)  # (N, S, H, Dh)
        keys = self.keys(keys).reshape(N, key_len, self.heads, self.head_dim)
        queries = self.queries(query).reshape(N, query_len, self.heads, self.head_dim)
        energy = torch.einsum("nqhd,nkhd->nhqk", [queries, keys])
        if mask is not None:
            energy = energy.masked_fill(mask == 0, float("-1e20"))
        attention = torch.softmax(energy / self.scale(), dim=3)
        out = torch.einsum("nhql,nlhd->nqhd", [attention, values]).reshape(N, query_len, self.heads * self.head_dim)
        return self.fc_out(out)


# the same repository as published (and in its video): `energy / (self.embed_size ** (1 / 2))`, the model width
class AladdinScaledByEmbedSize(AladdinSelfAttention):
    def scale(self):
        return self.embed_size ** (1 / 2)


class _Heads(nn.Module):
    """Shared body for the contract cases below: q/k/v/o Linears, keep (B, H, T, S) bool or additive bias."""

    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h = n_heads
        self.dk = d_model // n_heads
        self.Wq = nn.Linear(d_model, d_model)
        self.Wk = nn.Linear(d_model, d_model)
        self.Wv = nn.Linear(d_model, d_model)
        self.Wo = nn.Linear(d_model, d_model)

    def split(self, t):
        b, n, _ = t.shape
        return t.view(b, n, self.h, self.dk).transpose(1, 2)  # (B, H, T, Dh)

    def attend(self, q, k, v, keep=None, bias=None):
        s = self.split(q) @ self.split(k).transpose(-2, -1) / math.sqrt(self.dk)
        if bias is not None:
            s = s + bias
        if keep is not None:
            s = s.masked_fill(~keep, torch.finfo(s.dtype).min)
        w = s.softmax(-1)
        out = (w @ self.split(v)).transpose(1, 2).flatten(2)  # (B, T, D)
        return self.Wo(out)


# follows Hugging Face BERT-era code that calls attention with the extended mask and never None:
# forward(hidden_states, attention_mask) required, additive (B, 1, 1, S) (0 or finfo.min)
class RequiredAdditiveMask(_Heads):
    def forward(self, hidden_states, attention_mask):
        x = hidden_states
        return self.attend(self.Wq(x), self.Wk(x), self.Wv(x), bias=attention_mask)


# follows torch-style encoder code: forward(src, src_key_padding_mask=None), (B, S) bool, True = padding
class SrcKeyPadding(_Heads):
    def forward(self, src, src_key_padding_mask=None):
        keep = None if src_key_padding_mask is None else ~src_key_padding_mask[:, None, None, :]
        return self.attend(self.Wq(src), self.Wk(src), self.Wv(src), keep=keep)


# follows fairseq/ESPnet-style additive (B, S) padding masks: 0 for tokens, a large negative for pads, broadcast
# to the keys' axis
class AdditiveBS(_Heads):
    def forward(self, x, mask=None):
        bias = None if mask is None else mask[:, None, None, :]
        return self.attend(self.Wq(x), self.Wk(x), self.Wv(x), bias=bias)


# the annotated transformer's (B, 1, S) layout in additive form: mask.unsqueeze(1) -> (B, 1, 1, S)
class AdditiveB1S(_Heads):
    def forward(self, x, mask=None):
        bias = None if mask is None else mask.unsqueeze(1)
        return self.attend(self.Wq(x), self.Wk(x), self.Wv(x), bias=bias)


# the mask is the THIRD argument under a name the doctor does not know: forward(inputs, rel_bias=None, keep=None),
# rel_bias (B, H, T, S) added when given, keep (B, S) bool True = keep
class ThirdArgumentKeep(_Heads):
    def forward(self, inputs, rel_bias=None, keep=None):
        keep = None if keep is None else keep[:, None, None, :]
        return self.attend(self.Wq(inputs), self.Wk(inputs), self.Wv(inputs), keep=keep, bias=rel_bias)


# a required positional padding mask in torch.nn's sense: forward(x, pad), True = padding, never None
class RequiredPadTrue(_Heads):
    def forward(self, x, pad):
        return self.attend(self.Wq(x), self.Wk(x), self.Wv(x), keep=~pad.bool()[:, None, None, :])


# forward(Q, K, V, attn_mask=None) with a (B, S) additive padding mask: capital letters for the roles
class CapitalQKV(_Heads):
    def forward(self, Q, K, V, attn_mask=None):
        bias = None if attn_mask is None else attn_mask[:, None, None, :]
        return self.attend(self.Wq(Q), self.Wk(K), self.Wv(V), bias=bias)


# injected: the additive (B, S) padding mask broadcast on the QUERIES' axis ([:, None, :, None]): padded queries get
# a constant row, real queries still read the padded keys
class AdditiveBSOnQueries(_Heads):
    def forward(self, x, mask=None):
        bias = None if mask is None else mask[:, None, :, None]
        return self.attend(self.Wq(x), self.Wk(x), self.Wv(x), bias=bias)
