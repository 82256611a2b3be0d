"""Speech models' attention as their repositories structure it (re-typed in our own words: the pattern kept, the
code not copied). Built as ``CLASS(d_model, n_heads)``."""

import math

import torch
import torch.nn.functional as F
from torch import nn


# follows openai/whisper whisper/model.py (LayerNorm): computes in float32 and casts back to the input's dtype
class WhisperLayerNorm(nn.LayerNorm):
    def forward(self, x):
        return super().forward(x.float()).type(x.dtype)


# follows openai/whisper whisper/model.py (MultiHeadAttention): key without bias, q and k each scaled by
# Dh ** -0.25, the scores cast to float32 before the softmax and the weights cast back;
# forward(x, xa=None, mask=None, kv_cache=None)
class WhisperAttention(nn.Module):
    def __init__(self, n_state, n_head):
        super().__init__()
        self.n_head = n_head
        self.query = nn.Linear(n_state, n_state)
        self.key = nn.Linear(n_state, n_state, bias=False)
        self.value = nn.Linear(n_state, n_state)
        self.out = nn.Linear(n_state, n_state)

    def forward(self, x, xa=None, mask=None, kv_cache=None):
        q = self.query(x)
        k = self.key(x if xa is None else xa)
        v = self.value(x if xa is None else xa)
        wv, qk = self.qkv_attention(q, k, v, mask)
        return self.out(wv), qk

    def qkv_attention(self, q, k, v, mask=None):
        n_batch, n_ctx, n_state = q.shape
        scale = (n_state // self.n_head) ** -0.25
        q = q.view(*q.shape[:2], self.n_head, -1).permute(0, 2, 1, 3) * scale  # (B, H, T, Dh)
        k = k.view(*k.shape[:2], self.n_head, -1).permute(0, 2, 3, 1) * scale  # (B, H, Dh, S)
        v = v.view(*v.shape[:2], self.n_head, -1).permute(0, 2, 1, 3)  # (B, H, S, Dh)
        qk = q @ k
        if mask is not None:
            qk = qk + mask[:n_ctx, :n_ctx]
        qk = qk.float()
        w = F.softmax(qk, dim=-1).to(q.dtype)
        return (w @ v).permute(0, 2, 1, 3).flatten(start_dim=2), qk.detach()


# follows openai/whisper whisper/model.py (ResidualAttentionBlock, encoder side): pre-norm with the float32 LayerNorm
class WhisperBlock(nn.Module):
    def __init__(self, n_state, n_head):
        super().__init__()
        self.attn = WhisperAttention(n_state, n_head)
        self.attn_ln = WhisperLayerNorm(n_state)
        n_mlp = n_state * 4
        self.mlp = nn.Sequential(nn.Linear(n_state, n_mlp), nn.GELU(), nn.Linear(n_mlp, n_state))
        self.mlp_ln = WhisperLayerNorm(n_state)

    def forward(self, x, mask=None):
        x = x + self.attn(self.attn_ln(x), mask=mask)[0]
        x = x + self.mlp(self.mlp_ln(x))
        return x


# follows espnet/espnet espnet/nets/pytorch_backend/transformer/attention.py (MultiHeadedAttention):
# forward(query, key, value, mask) with mask (B, 1, S) or (B, T, S), 1 = keep; filled with finfo.min before the
# softmax AND the weights zeroed again after it (harmless: those weights are already 0)
class EspnetAttention(nn.Module):
    def __init__(self, n_feat, n_head, dropout_rate=0.0):
        super().__init__()
        self.d_k = n_feat // n_head
        self.h = n_head
        self.linear_q = nn.Linear(n_feat, n_feat)
        self.linear_k = nn.Linear(n_feat, n_feat)
        self.linear_v = nn.Linear(n_feat, n_feat)
        self.linear_out = nn.Linear(n_feat, n_feat)
        self.dropout = nn.Dropout(p=dropout_rate)

    def forward_qkv(self, query, key, value):
        n_batch = query.size(0)
        q = self.linear_q(query).view(n_batch, -1, self.h, self.d_k).transpose(1, 2)  # (B, H, T, Dk)
        k = self.linear_k(key).view(n_batch, -1, self.h, self.d_k).transpose(1, 2)
        v = self.linear_v(value).view(n_batch, -1, self.h, self.d_k).transpose(1, 2)
        return q, k, v

    def forward_attention(self, value, scores, mask):
        n_batch = value.size(0)
        if mask is not None:
            mask = mask.unsqueeze(1).eq(0)  # (B, 1, *, S)
            min_value = torch.finfo(scores.dtype).min
            scores = scores.masked_fill(mask, min_value)
            attn = torch.softmax(scores, dim=-1).masked_fill(mask, 0.0)
        else:
            attn = torch.softmax(scores, dim=-1)
        x = torch.matmul(self.dropout(attn), value)
        x = x.transpose(1, 2).contiguous().view(n_batch, -1, self.h * self.d_k)  # (B, T, D)
        return self.linear_out(x)

    def forward(self, query, key, value, mask):
        q, k, v = self.forward_qkv(query, key, value)
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(self.d_k)
        return self.forward_attention(v, scores, mask)


# follows sooftware/conformer conformer/attention.py (RelativeMultiHeadAttention): `self.sqrt_dim =
# math.sqrt(d_model)` divides the scores (reported upstream: the model width, not d_head); the relative-position
# term is left out here, the content term and its scale are the author's
class ConformerAttention(nn.Module):
    def __init__(self, d_model=512, num_heads=16):
        super().__init__()
        self.d_model = d_model
        self.d_head = int(d_model / num_heads)
        self.num_heads = num_heads
        self.sqrt_dim = math.sqrt(d_model)
        self.query_proj = nn.Linear(d_model, d_model)
        self.key_proj = nn.Linear(d_model, d_model)
        self.value_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def forward(self, query, key, value, mask=None):
        batch_size = value.size(0)
        query = self.query_proj(query).view(batch_size, -1, self.num_heads, self.d_head)
        key = self.key_proj(key).view(batch_size, -1, self.num_heads, self.d_head).permute(0, 2, 1, 3)
        value = self.value_proj(value).view(batch_size, -1, self.num_heads, self.d_head).permute(0, 2, 1, 3)
        score = torch.matmul(query.transpose(1, 2), key.transpose(2, 3)) / self.sqrt_dim
        if mask is not None:
            mask = mask.unsqueeze(1)
            score.masked_fill_(mask, -1e9)
        attn = F.softmax(score, -1)
        context = torch.matmul(attn, value).transpose(1, 2)
        context = context.contiguous().view(batch_size, -1, self.d_model)
        return self.out_proj(context)


# follows facebookresearch/fairseq fairseq/modules/multihead_attention.py (the reference path): (T, B, C)
# inputs, q scaled by head_dim ** -0.5 before the product, heads folded into the batch (B*H, T, Dh),
# key_padding_mask (B, S) True = padding
class FairseqAttention(nn.Module):
    def __init__(self, embed_dim, num_heads):
        super().__init__()
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.scaling = self.head_dim ** -0.5
        self.k_proj = nn.Linear(embed_dim, embed_dim)
        self.v_proj = nn.Linear(embed_dim, embed_dim)
        self.q_proj = nn.Linear(embed_dim, embed_dim)
        self.out_proj = nn.Linear(embed_dim, embed_dim)

    def forward(self, query, key, value, key_padding_mask=None, need_weights=True):
        tgt_len, bsz, embed_dim = query.size()
        q = self.q_proj(query) * self.scaling
        k = self.k_proj(key)
        v = self.v_proj(value)
        q = q.contiguous().view(tgt_len, bsz * self.num_heads, self.head_dim).transpose(0, 1)  # (B*H, T, Dh)
        k = k.contiguous().view(-1, bsz * self.num_heads, self.head_dim).transpose(0, 1)
        v = v.contiguous().view(-1, bsz * self.num_heads, self.head_dim).transpose(0, 1)
        src_len = k.size(1)
        attn_weights = torch.bmm(q, k.transpose(1, 2))  # (B*H, T, S)
        if key_padding_mask is not None:
            attn_weights = attn_weights.view(bsz, self.num_heads, tgt_len, src_len)
            attn_weights = attn_weights.masked_fill(key_padding_mask.unsqueeze(1).unsqueeze(2).to(torch.bool),
                                                    float("-inf"))
            attn_weights = attn_weights.view(bsz * self.num_heads, tgt_len, src_len)
        attn_probs = F.softmax(attn_weights.float(), dim=-1).type_as(attn_weights)
        attn = torch.bmm(attn_probs, v)  # (B*H, T, Dh)
        attn = attn.transpose(0, 1).contiguous().view(tgt_len, bsz, embed_dim)
        attn = self.out_proj(attn)
        weights = attn_probs.view(bsz, self.num_heads, tgt_len, src_len) if need_weights else None
        return attn, weights


# follows espnet's PositionwiseFeedForward + EncoderLayer (normalize_before=True): each residual wraps a
# pre-normed sub-layer, the attention called as self_attn(x, x, x, mask)
class EspnetEncoderLayer(nn.Module):
    def __init__(self, size, n_head):
        super().__init__()
        self.self_attn = EspnetAttention(size, n_head)
        self.feed_forward = nn.Sequential(nn.Linear(size, 4 * size), nn.ReLU(), nn.Dropout(0.0),
                                          nn.Linear(4 * size, size))
        self.norm1 = nn.LayerNorm(size, eps=1e-12)
        self.norm2 = nn.LayerNorm(size, eps=1e-12)
        self.dropout = nn.Dropout(0.0)

    def forward(self, x, mask):
        residual = x
        x = self.norm1(x)
        x = residual + self.dropout(self.self_attn(x, x, x, mask))
        residual = x
        x = self.norm2(x)
        x = residual + self.dropout(self.feed_forward(x))
        return x
