"""The third wave of real modules (issue 29), each re-typed in our own words from the repository named above it:
time series, recommendation-style encoders, GPT-1, Chinese course code, and bugs as published. Built as
``CLASS(d_model, n_heads)``."""

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


# follows yuqinie98/PatchTST PatchTST_self_supervised/src/models/layers/attention.py (MultiheadAttention +
# ScaledDotProductAttention): W_Q/W_K/W_V, k permuted to (B, H, Dh, S) once, a scale kept as a frozen Parameter,
# the output through to_out = Sequential(Linear, Dropout); returns (out, weights)
class PatchAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h, self.dk = n_heads, d_model // n_heads
        self.W_Q, self.W_K, self.W_V = (nn.Linear(d_model, d_model) for _ in range(3))
        self.scale = nn.Parameter(torch.tensor(self.dk**-0.5), requires_grad=False)
        self.to_out = nn.Sequential(nn.Linear(d_model, d_model), nn.Dropout(0.0))

    def forward(self, Q, K=None, V=None, prev=None):
        K = Q if K is None else K
        V = Q if V is None else V
        b = Q.size(0)
        q = self.W_Q(Q).view(b, -1, self.h, self.dk).transpose(1, 2)
        k = self.W_K(K).view(b, -1, self.h, self.dk).permute(0, 2, 3, 1)
        v = self.W_V(V).view(b, -1, self.h, self.dk).transpose(1, 2)
        s = torch.matmul(q, k) * self.scale
        if prev is not None:  # residual attention: the previous layer's scores
            s = s + prev
        w = F.softmax(s, dim=-1)
        out = torch.matmul(w, v).transpose(1, 2).contiguous().view(b, -1, self.h * self.dk)
        return self.to_out(out), w


# follows PatchTST src/models/patchTST.py (TSTEncoderLayer, norm="LayerNorm", pre_norm=False): post-norm, a GELU FFN,
# forward(src, prev=None) whose second argument is NOT a mask
class PatchEncoderLayer(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.self_attn = PatchAttention(d_model, n_heads)
        self.norm_attn = nn.LayerNorm(d_model)
        self.ff = nn.Sequential(
            nn.Linear(d_model, 2 * d_model), nn.GELU(), nn.Dropout(0.0), nn.Linear(2 * d_model, d_model)
        )
        self.norm_ffn = nn.LayerNorm(d_model)

    def forward(self, src, prev=None):
        src2, _ = self.self_attn(src, src, src)
        src = self.norm_attn(src + src2)
        return self.norm_ffn(src + self.ff(src))


# injected into PatchTST's encoder layer: the scores divided by the model width (d_model ** -0.5)
class PatchAttentionByDModel(PatchAttention):
    def __init__(self, d_model, n_heads):
        super().__init__(d_model, n_heads)
        self.scale = nn.Parameter(torch.tensor(d_model**-0.5), requires_grad=False)


# GPT-1's Conv1D as in huggingface/transformers pytorch_utils.py: y = x @ W + b, W stored (in, out)
class Conv1D(nn.Module):
    def __init__(self, nf, nx):
        super().__init__()
        self.nf = nf
        self.weight = nn.Parameter(torch.empty(nx, nf).normal_(std=0.02))
        self.bias = nn.Parameter(torch.zeros(nf))

    def forward(self, x):
        return torch.addmm(self.bias, x.reshape(-1, x.size(-1)), self.weight).view(*x.shape[:-1], self.nf)


# follows transformers models/openai/modeling_openai.py (Attention, scale=True): c_attn fused q|k|v Conv1D, a tril
# buffer applied as w * b - 1e4 * (1 - b), key split as (B, H, Dh, S), returns a LIST [a] (and the weights)
class GPT1Attention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h = n_heads
        self.register_buffer("bias", torch.tril(torch.ones(32, 32)).view(1, 1, 32, 32), persistent=False)
        self.c_attn = Conv1D(3 * d_model, d_model)
        self.c_proj = Conv1D(d_model, d_model)

    def split(self, x, k=False):
        x = x.view(*x.shape[:-1], self.h, x.size(-1) // self.h)
        return x.permute(0, 2, 3, 1) if k else x.permute(0, 2, 1, 3)

    def forward(self, x, attention_mask=None):
        q, k, v = self.c_attn(x).split(x.size(-1), dim=2)
        q, k, v = self.split(q), self.split(k, k=True), self.split(v)
        w = torch.matmul(q, k) / math.sqrt(v.size(-1))
        b = self.bias[:, :, : w.size(-2), : w.size(-1)]
        w = w * b + -1e4 * (1 - b)
        if attention_mask is not None:
            w = w + attention_mask
        a = torch.matmul(F.softmax(w, dim=-1), v).permute(0, 2, 1, 3).contiguous()
        return [self.c_proj(a.view(*a.shape[:-2], -1))]


# follows modeling_openai.py (MLP and Block): post-norm, ln_1(x + a), ln_2(n + mlp(n)), the MLP of two Conv1D with
# GELU; the block returns a list [h]
class GPT1Block(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.attn = GPT1Attention(d_model, n_heads)
        self.ln_1 = nn.LayerNorm(d_model, eps=1e-5)
        self.c_fc = Conv1D(4 * d_model, d_model)
        self.c_proj = Conv1D(d_model, 4 * d_model)
        self.ln_2 = nn.LayerNorm(d_model, eps=1e-5)

    def forward(self, x, attention_mask=None):
        a = self.attn(x, attention_mask=attention_mask)[0]
        n = self.ln_1(x + a)
        h = self.ln_2(n + self.c_proj(F.gelu(self.c_fc(n), approximate="tanh")))
        return [h]


# injected into GPT-1's block: the second residual adds the block's input instead of n
class GPT1BlockWrongResidual(GPT1Block):
    def forward(self, x, attention_mask=None):
        a = self.attn(x, attention_mask=attention_mask)[0]
        n = self.ln_1(x + a)
        h = self.ln_2(self.c_proj(F.gelu(self.c_fc(n), approximate="tanh")))
        return [h]


# a real bug as published (a public attention module found by searching, "CustomSelfAttention" after Dong-Hyun Lee's
# BERT port): key_padding_mask (B, S), True = pad, unsqueezed to (B, 1, S, 1): the padded QUERIES get -1e10
class PadOnQueriesSelfAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.proj_q, self.proj_k, self.proj_v = (nn.Linear(d_model, d_model) for _ in range(3))
        self.output = nn.Linear(d_model, d_model)
        self.h, self.dh = n_heads, d_model // n_heads

    def forward(self, x, key_padding_mask=None):
        b, t, _ = x.shape
        q, k, v = (
            p(x).view(b, t, self.h, self.dh).permute(0, 2, 1, 3) for p in (self.proj_q, self.proj_k, self.proj_v)
        )
        energy = torch.matmul(q, k.permute(0, 1, 3, 2)) / (self.dh**0.5)
        if key_padding_mask is not None:
            energy = energy.masked_fill(key_padding_mask.unsqueeze(1).unsqueeze(-1), -1e10)
        x = torch.matmul(F.softmax(energy, dim=-1), v).permute(0, 2, 1, 3).contiguous()
        return self.output(x.view(b, t, -1))


# a real bug as published (a French regression Transformer found by searching): the masked_fill result is thrown
# away (score.masked_fill(...) without assignment), so the padding mask does nothing
class DiscardedMaskAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.heads, self.d_k = n_heads, d_model // n_heads
        self.Wq, self.Wk, self.Wv, self.Wo = (nn.Linear(d_model, d_model) for _ in range(4))

    @staticmethod
    def attention(query, key, value, mask):
        score = (query @ key.transpose(-1, -2)) / math.sqrt(query.shape[-1])
        if mask is not None:
            score.masked_fill(mask == 0, float("-inf"))
        return score.softmax(dim=-1) @ value

    def forward(self, q, k, v, mask):
        b = q.shape[0]
        query, key, value = (
            w(t).view(b, t.shape[1], self.heads, self.d_k).transpose(1, 2)
            for w, t in ((self.Wq, q), (self.Wk, k), (self.Wv, v))
        )
        x = DiscardedMaskAttention.attention(query, key, value, mask)
        return self.Wo(x.transpose(1, 2).contiguous().view(b, -1, self.heads * self.d_k))


# 参照一份中文课程作业（Lab03 情感分析 models.py 的手写 MultiHeadAttention）：key_padding_mask (B, S) True = pad，
# 先对 key 列填 -inf，再把 padding 的 query 行置 0，softmax 后再把这些行的权重清零，输出里 padding 行也置 0；
# 返回 (输出, 权重)
class ZhLabAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h, self.dh = n_heads, d_model // n_heads
        self.q_proj, self.k_proj, self.v_proj, self.out_proj = (nn.Linear(d_model, d_model) for _ in range(4))

    def _heads(self, x):
        b, t, _ = x.shape
        return x.view(b, t, self.h, self.dh).transpose(1, 2)

    def forward(self, x, key_padding_mask=None):
        b, t, d = x.shape
        q, k, v = self._heads(self.q_proj(x)), self._heads(self.k_proj(x)), self._heads(self.v_proj(x))
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(self.dh)
        if key_padding_mask is not None:
            scores = scores.masked_fill(key_padding_mask.unsqueeze(1).unsqueeze(2), float("-inf"))
            scores = scores.masked_fill(key_padding_mask.unsqueeze(1).unsqueeze(-1), 0.0)
        w = torch.softmax(scores, dim=-1)
        if key_padding_mask is not None:
            w = w.masked_fill(key_padding_mask.unsqueeze(1).unsqueeze(-1), 0.0)
        out = self.out_proj(torch.matmul(w, v).transpose(1, 2).contiguous().view(b, t, d))
        if key_padding_mask is not None:
            out = out.masked_fill(key_padding_mask.unsqueeze(-1), 0.0)
        return out, w


# 参照一份中文“从零实现 Transformer 编码层”教程：Pre-LN，同一个 norm1 分别作用在 q、k、v 三个输入上（一个子层），
# mask 为 True 表示屏蔽，-inf 填充
class ZhPreLNEncoderLayer(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.self_attn = ZhQKVAttention(d_model, n_heads)
        self.linear1, self.linear2 = nn.Linear(d_model, 4 * d_model), nn.Linear(4 * d_model, d_model)
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)

    def forward(self, x, mask=None):
        attn_out, _ = self.self_attn(self.norm1(x), self.norm1(x), self.norm1(x), mask=mask)
        x = x + attn_out
        return x + self.linear2(F.gelu(self.linear1(self.norm2(x))))


class ZhQKVAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h, self.dk = n_heads, d_model // n_heads
        self.W_q, self.W_k, self.W_v, self.W_o = (nn.Linear(d_model, d_model) for _ in range(4))

    def forward(self, query, key, value, mask=None):
        b = query.size(0)
        q, k, v = (
            w(t).view(b, -1, self.h, self.dk).transpose(1, 2)
            for w, t in ((self.W_q, query), (self.W_k, key), (self.W_v, value))
        )
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(self.dk)
        if mask is not None:
            scores = scores.masked_fill(mask, float("-inf"))
        attn = F.softmax(scores, dim=-1)
        return self.W_o(torch.matmul(attn, v).transpose(1, 2).contiguous().view(b, -1, self.h * self.dk)), attn


# injected into the Chinese Pre-LN layer: norm1 used for the FFN too (norm2 built, never called)
class ZhPreLNSharedNorm(ZhPreLNEncoderLayer):
    def forward(self, x, mask=None):
        attn_out, _ = self.self_attn(self.norm1(x), self.norm1(x), self.norm1(x), mask=mask)
        x = x + attn_out
        return x + self.linear2(F.gelu(self.linear1(self.norm1(x))))


# the item-3 pattern (a padding path that masks the queries behind a right one), written after the attention
# modules above: a 4-D mask is used as given, a (B, S) mask is widened on the wrong axis
class TwoMaskPaths(ZhQKVAttention):
    def forward(self, x, mask=None):
        b, t, _ = x.shape
        q, k, v = (w(x).view(b, t, self.h, self.dk).transpose(1, 2) for w in (self.W_q, self.W_k, self.W_v))
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(self.dk)
        if mask is not None:
            if mask.dim() == 2:
                mask = mask.unsqueeze(1).unsqueeze(-1)
            scores = scores.masked_fill(mask == 0, -1e9)
        return self.W_o(torch.matmul(F.softmax(scores, dim=-1), v).transpose(1, 2).reshape(b, t, -1))


# follows PatchTST's TSTEncoderLayer with its default norm="BatchNorm": nn.BatchNorm1d between two transposes after
# each residual add (post-norm), the design chosen there for time-series patches
class _Transpose(nn.Module):
    def __init__(self, a, b):
        super().__init__()
        self.a, self.b = a, b

    def forward(self, x):
        return x.transpose(self.a, self.b)


class PatchBatchNormLayer(PatchEncoderLayer):
    def __init__(self, d_model, n_heads):
        super().__init__(d_model, n_heads)
        self.norm_attn = nn.Sequential(_Transpose(1, 2), nn.BatchNorm1d(d_model), _Transpose(1, 2))
        self.norm_ffn = nn.Sequential(_Transpose(1, 2), nn.BatchNorm1d(d_model), _Transpose(1, 2))


# a block written for nn.Sequential, after a public encoder-decoder project found by searching: forward(inputs)
# unpacks (x, mask) and returns (out, mask); post-norm, a ReLU FFN; mask (B, 1, 1, S), 0 = pad, -1e10 fill
class SequentialTupleBlock(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.attention = ZhQKVAttention(d_model, n_heads)
        self.ffw = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.ReLU(), nn.Linear(4 * d_model, d_model))
        self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)

    def forward(self, inputs):
        x, mask = inputs
        out = self.ln1(self.attention(x, x, x, mask=mask == 0)[0] + x)
        return self.ln2(self.ffw(out) + out), mask


# injected into the tuple block: the FFN's residual forgotten
class SequentialTupleNoResidual(SequentialTupleBlock):
    def forward(self, inputs):
        x, mask = inputs
        out = self.ln1(self.attention(x, x, x, mask=mask == 0)[0] + x)
        return self.ln2(self.ffw(out)), mask


# follows pmixer/SASRec.pytorch model.py (PointWiseFeedForward): two Conv1d(kernel 1) over (B, D, T), and the
# residual added INSIDE the feed-forward (outputs += inputs)
class SASRecFeedForward(nn.Module):
    def __init__(self, d_model):
        super().__init__()
        self.conv1 = nn.Conv1d(d_model, d_model, kernel_size=1)
        self.conv2 = nn.Conv1d(d_model, d_model, kernel_size=1)

    def forward(self, inputs):
        outputs = self.conv2(F.relu(self.conv1(inputs.transpose(-1, -2)))).transpose(-1, -2)
        return outputs + inputs


# a real bug from the repository's history (SASRec.pytorch model.py, the original SASRec layout, later replaced by a
# norm_first option after its Result_Norm.md comparison): Q = LayerNorm(seqs) is the query AND the residual
# (seqs = Q + mha), keys and values read the raw seqs; the FFN's own residual adds its normalised input. A causal
# self-attention through torch.nn.MultiheadAttention on (T, B, D), the future masked with ~tril
class SASRecOriginalBlock(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.attention_layernorm = nn.LayerNorm(d_model, eps=1e-8)
        self.attention_layer = nn.MultiheadAttention(d_model, n_heads, 0.0)
        self.forward_layernorm = nn.LayerNorm(d_model, eps=1e-8)
        self.forward_layer = SASRecFeedForward(d_model)

    def forward(self, seqs):
        tl = seqs.shape[1]
        attention_mask = ~torch.tril(torch.ones((tl, tl), dtype=torch.bool))
        seqs = torch.transpose(seqs, 0, 1)
        Q = self.attention_layernorm(seqs)
        mha_outputs, _ = self.attention_layer(Q, seqs, seqs, attn_mask=attention_mask)
        seqs = Q + mha_outputs
        seqs = torch.transpose(seqs, 0, 1)
        return self.forward_layer(self.forward_layernorm(seqs))


# the same repository's python/model.py with norm_first=True (Pre-LN, the fix): x = LN(seqs) for q, k and v
class SASRecPreLNBlock(SASRecOriginalBlock):
    def forward(self, seqs):
        tl = seqs.shape[1]
        attention_mask = ~torch.tril(torch.ones((tl, tl), dtype=torch.bool))
        seqs = torch.transpose(seqs, 0, 1)
        x = self.attention_layernorm(seqs)
        mha_outputs, _ = self.attention_layer(x, x, x, attn_mask=attention_mask)
        seqs = torch.transpose(seqs + mha_outputs, 0, 1)
        h = self.forward_layernorm(seqs)
        return seqs + self.forward_layer.conv2(F.relu(self.forward_layer.conv1(h.transpose(-1, -2)))).transpose(-1, -2)


# follows huggingface/diffusers models/attention_processor.py (Attention with AttnProcessor2_0): to_q/to_k/to_v without
# bias, to_out = [Linear, Dropout], heads by view/transpose, F.scaled_dot_product_attention; the attention_mask
# reaches SDPA as given
class DiffusersAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.heads = n_heads
        self.to_q, self.to_k, self.to_v = (nn.Linear(d_model, d_model, bias=False) for _ in range(3))
        self.to_out = nn.ModuleList([nn.Linear(d_model, d_model), nn.Dropout(0.0)])

    def forward(self, hidden_states, encoder_hidden_states=None, attention_mask=None):
        context = hidden_states if encoder_hidden_states is None else encoder_hidden_states
        b, t, d = hidden_states.shape
        q = self.to_q(hidden_states).view(b, -1, self.heads, d // self.heads).transpose(1, 2)
        k = self.to_k(context).view(b, -1, self.heads, d // self.heads).transpose(1, 2)
        v = self.to_v(context).view(b, -1, self.heads, d // self.heads).transpose(1, 2)
        h = F.scaled_dot_product_attention(q, k, v, attn_mask=attention_mask)
        h = h.transpose(1, 2).reshape(b, -1, d)
        return self.to_out[1](self.to_out[0](h))


# diffusers models/activations.py (GEGLU): ONE Linear D -> 2F, chunked into (hidden, gate): hidden * gelu(gate)
class GEGLU(nn.Module):
    def __init__(self, d_in, d_out):
        super().__init__()
        self.proj = nn.Linear(d_in, 2 * d_out)

    def forward(self, x):
        hidden, gate = self.proj(x).chunk(2, dim=-1)
        return hidden * F.gelu(gate)


# diffusers models/attention.py (BasicTransformerBlock, norm_type="layer_norm", no cross-attention): norm1 -> attn1,
# norm3 -> FeedForward(GEGLU, Dropout, Linear), pre-norm with residuals
class DiffusersBasicBlock(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.norm1 = nn.LayerNorm(d_model)
        self.attn1 = DiffusersAttention(d_model, n_heads)
        self.norm3 = nn.LayerNorm(d_model)
        self.ff = nn.Sequential(GEGLU(d_model, 4 * d_model), nn.Dropout(0.0), nn.Linear(4 * d_model, d_model))

    def forward(self, hidden_states, attention_mask=None):
        hidden_states = self.attn1(self.norm1(hidden_states), attention_mask=attention_mask) + hidden_states
        return self.ff(self.norm3(hidden_states)) + hidden_states


# the same block with its second attention (double_self_attention, or a cross-attention called without a context):
# norm2 -> attn2 over the block's own tokens, given the ENCODER mask (None), not attention_mask
class DiffusersTwoAttentionBlock(DiffusersBasicBlock):
    def __init__(self, d_model, n_heads):
        super().__init__(d_model, n_heads)
        self.norm2 = nn.LayerNorm(d_model)
        self.attn2 = DiffusersAttention(d_model, n_heads)

    def forward(self, hidden_states, attention_mask=None, encoder_hidden_states=None, encoder_attention_mask=None):
        hidden_states = self.attn1(self.norm1(hidden_states), attention_mask=attention_mask) + hidden_states
        hidden_states = (
            self.attn2(self.norm2(hidden_states), encoder_hidden_states, attention_mask=encoder_attention_mask)
            + hidden_states
        )
        return self.ff(self.norm3(hidden_states)) + hidden_states


# injected into the diffusers block: the GEGLU halves used the wrong way round is a valid reading (both orders are
# tried); the injected bug is the scores scaled by the model width through SDPA's scale
class DiffusersAttentionByDModel(DiffusersAttention):
    def forward(self, hidden_states, encoder_hidden_states=None, attention_mask=None):
        b, t, d = hidden_states.shape
        q, k, v = (f(hidden_states).view(b, -1, self.heads, d // self.heads).transpose(1, 2)
                   for f in (self.to_q, self.to_k, self.to_v))
        h = F.scaled_dot_product_attention(q, k, v, attn_mask=attention_mask, scale=d**-0.5)
        return self.to_out[0](h.transpose(1, 2).reshape(b, -1, d))


# a real bug from a repository's history (hyunwoongko/transformer, models/layers/*.py as first published, fixed in
# later commits): heads split by view(B, H, T, Dh) with no transpose, k "transposed" by another view, the scores
# divided by sqrt(d_model), masked with -e = -1e-12 (which hides nothing), nn.Softmax() without dim, heads merged by
# view, no output projection
class HyunwoongFirstAttention(nn.Module):
    def __init__(self, d_model, n_head):
        super().__init__()
        self.n_head = n_head
        self.softmax = nn.Softmax(dim=-1)  # the implicit dim of a 4-D input is 1; kept on the keys here
        self.w_q, self.w_k, self.w_v = (nn.Linear(d_model, d_model) for _ in range(3))

    def project(self, tensor):
        batch_size, length, d_model = tensor.size()
        return tensor.view(batch_size, self.n_head, length, d_model // self.n_head)

    def forward(self, q, k, v, mask=None, e=1e-12):
        q, k, v = self.project(self.w_q(q)), self.project(self.w_k(k)), self.project(self.w_v(v))
        batch_size, head, length, d_tensor = k.size()
        score = (q @ k.transpose(2, 3)) / math.sqrt(head * d_tensor)
        if mask is not None:
            score = score.masked_fill(mask == 0, -e)
        out = self.softmax(score) @ v
        return out.view(batch_size, length, head * d_tensor)


# the same repository's LayerNorm (layer_norm.py): gamma * (x - mean) / (std + eps) + beta with the UNBIASED std and
# eps 1e-12, and its post-norm EncoderLayer (encoder_layer.py) around the later, fixed attention (w_concat)
class HyunwoongLayerNorm(nn.Module):
    def __init__(self, d_model, eps=1e-12):
        super().__init__()
        self.gamma = nn.Parameter(torch.ones(d_model))
        self.beta = nn.Parameter(torch.zeros(d_model))
        self.eps = eps

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        std = x.std(-1, keepdim=True)
        out = self.gamma * (x - mean)
        out /= std + self.eps
        return out + self.beta


class HyunwoongAttention(nn.Module):
    def __init__(self, d_model, n_head):
        super().__init__()
        self.n_head = n_head
        self.w_q, self.w_k, self.w_v, self.w_concat = (nn.Linear(d_model, d_model) for _ in range(4))

    def split(self, t):
        b, length, d = t.size()
        return t.view(b, length, self.n_head, d // self.n_head).transpose(1, 2)

    def forward(self, q, k, v, mask=None):
        q, k, v = self.split(self.w_q(q)), self.split(self.w_k(k)), self.split(self.w_v(v))
        score = q @ k.transpose(2, 3) / math.sqrt(k.size(-1))
        if mask is not None:
            score = score.masked_fill(mask == 0, -10000)
        out = torch.softmax(score, dim=-1) @ v
        b, h, length, dt = out.size()
        return self.w_concat(out.transpose(1, 2).contiguous().view(b, length, h * dt))


class HyunwoongEncoderLayer(nn.Module):
    def __init__(self, d_model, n_head):
        super().__init__()
        self.attention = HyunwoongAttention(d_model, n_head)
        self.norm1 = HyunwoongLayerNorm(d_model)
        self.linear1, self.linear2 = nn.Linear(d_model, 4 * d_model), nn.Linear(4 * d_model, d_model)
        self.norm2 = HyunwoongLayerNorm(d_model)

    def forward(self, x, s_mask=None):
        _x = x
        x = self.norm1(self.attention(q=x, k=x, v=x, mask=s_mask) + _x)
        _x = x
        return self.norm2(self.linear2(F.relu(self.linear1(x))) + _x)


# follows zhouhaoyi/Informer2020 models/attn.py (FullAttention + AttentionLayer, mask_flag=True as in the decoder):
# query/key/value projections viewed as (B, L, H, -1), einsum "blhe,bshe->bhls", a TriangularCausalMask built when
# no mask is given (True above the diagonal, filled with -inf), the scale 1/sqrt(E) applied inside the softmax,
# values by einsum "bhls,bshd->blhd", out_projection; returns (out, attn)
class InformerAttentionLayer(nn.Module):
    mix = False

    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads = n_heads
        self.query_projection, self.key_projection, self.value_projection, self.out_projection = (
            nn.Linear(d_model, d_model) for _ in range(4)
        )

    def inner(self, queries, keys, values, attn_mask):
        B, L, H, E = queries.shape
        scores = torch.einsum("blhe,bshe->bhls", queries, keys)
        if attn_mask is None:
            attn_mask = torch.triu(torch.ones(B, 1, L, L, dtype=torch.bool), diagonal=1)
        scores.masked_fill_(attn_mask, -np.inf)
        A = torch.softmax(scores / math.sqrt(E), dim=-1)
        return torch.einsum("bhls,bshd->blhd", A, values).contiguous(), A

    def forward(self, queries, keys, values, attn_mask=None):
        B, L, _ = queries.shape
        S, H = keys.shape[1], self.n_heads
        q = self.query_projection(queries).view(B, L, H, -1)
        k = self.key_projection(keys).view(B, S, H, -1)
        v = self.value_projection(values).view(B, S, H, -1)
        out, attn = self.inner(q, k, v, attn_mask)
        if self.mix:
            out = out.transpose(2, 1).contiguous()
        return self.out_projection(out.view(B, L, -1)), attn


# the same AttentionLayer with mix=True, as Informer's decoder builds it: the (B, L, H, D) output transposed to
# (B, H, L, D) and then viewed as (B, L, H*D), which mixes the heads of one token with other tokens
class InformerMixAttention(InformerAttentionLayer):
    mix = True


# 参照 datawhalechina/happy-llm docs/chapter2/code/transformer.py（中文大模型课程）的 MultiHeadAttention：wq/wk/wv/wo
# 无偏置，is_causal 时注册 (1, 1, L, L) 的 triu(-inf) 缓冲区并加到分数上，softmax 在 float32 里算再 type_as 转回
class HappyCausalAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_local_heads, self.head_dim = n_heads, d_model // n_heads
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(d_model, d_model, bias=False) for _ in range(4))
        mask = torch.triu(torch.full((1, 1, 32, 32), float("-inf")), diagonal=1)
        self.register_buffer("mask", mask)

    def forward(self, q, k, v):
        bsz, seqlen, _ = q.shape
        xq = self.wq(q).view(bsz, seqlen, self.n_local_heads, self.head_dim).transpose(1, 2)
        xk = self.wk(k).view(bsz, seqlen, self.n_local_heads, self.head_dim).transpose(1, 2)
        xv = self.wv(v).view(bsz, seqlen, self.n_local_heads, self.head_dim).transpose(1, 2)
        scores = torch.matmul(xq, xk.transpose(2, 3)) / math.sqrt(self.head_dim)
        scores = scores + self.mask[:, :, :seqlen, :seqlen]
        scores = F.softmax(scores.float(), dim=-1).type_as(xq)
        output = torch.matmul(scores, xv).transpose(1, 2).contiguous().view(bsz, seqlen, -1)
        return self.wo(output)


# 课程里的 LayerNorm（a_2、b_2，方差 unbiased=False，eps 1e-6）
class HappyLayerNorm(nn.Module):
    def __init__(self, features, eps=1e-6):
        super().__init__()
        self.a_2 = nn.Parameter(torch.ones(features))
        self.b_2 = nn.Parameter(torch.zeros(features))
        self.eps = eps

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        var = x.var(dim=-1, keepdim=True, unbiased=False)
        return self.a_2 * (x - mean) / torch.sqrt(var + self.eps) + self.b_2


# 课程原样的真实错误（real, as published）：EncoderLayer 先 x = attention_norm(x)，再 h = x + attention(x, x, x)，
# 残差加的是归一化之后的 x（Pre-Norm 的分支接错了）
class HappyEncoderLayer(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.attention_norm = HappyLayerNorm(d_model)
        self.attention = HappyCausalAttention(d_model, n_heads)
        self.attention.mask.zero_()  # the encoder's attention is not causal (is_causal=False: no mask)
        self.fnn_norm = HappyLayerNorm(d_model)
        self.w1, self.w2 = nn.Linear(d_model, d_model, bias=False), nn.Linear(d_model, d_model, bias=False)

    def forward(self, x):
        x = self.attention_norm(x)
        h = x + self.attention.forward(x, x, x)
        return h + self.w2(F.relu(self.w1(self.fnn_norm(h))))


# a real bug as published (a public MultiHeadAttention found by searching, with W_Qi/W_Ki/W_Vi lists left unused):
# mask (B, S), 1 = pad, unsqueezed to (B, 1, S, 1), so the padded QUERIES are filled; mask=None is not handled
class FutureMaskOnQueries(nn.Module):
    def __init__(self, d_model, n_head):
        super().__init__()
        self.n_head, self.d_k = n_head, d_model // n_head
        self.WQ, self.WK, self.WV = (nn.Linear(d_model, d_model, bias=False) for _ in range(3))
        self.output_linear = nn.Linear(d_model, d_model, bias=False)

    def forward(self, x, mask=None):
        mask = mask.unsqueeze(1).unsqueeze(-1)
        q = self.WQ(x).view(x.size(0), x.size(1), self.n_head, self.d_k).transpose(1, 2)
        k_T = self.WK(x).view(x.size(0), x.size(1), self.n_head, self.d_k).permute(0, 2, 3, 1)
        v = self.WV(x).view(x.size(0), x.size(1), self.n_head, self.d_k).transpose(1, 2)
        scores = q @ k_T / self.d_k**0.5
        scores = scores.masked_fill((mask == 1), -1e9)
        context = (F.softmax(scores, dim=-1) @ v).transpose(1, 2).contiguous().view(x.size(0), x.size(1), -1)
        return self.output_linear(context)
