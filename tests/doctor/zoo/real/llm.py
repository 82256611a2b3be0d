"""Decoder-only LLM attention and blocks as English tutorials and model repositories write them (re-typed in our own
words). RMSNorm computing in float32, RoPE tables built in float32, scores upcast before the softmax, grouped and
multi-query heads, fused and interleaved projections. Built as ``CLASS(d_model, n_heads)``; causal ones are
checked with ``causal=True`` (they hide the future themselves)."""

import math

import torch
import torch.nn.functional as F
from torch import nn


# follows huggingface/transformers models/llama/modeling_llama.py (LlamaRMSNorm): upcast to float32, rsqrt of the
# mean square, cast back, then the weight
class LlamaRMSNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


# follows modeling_llama.py (LlamaRotaryEmbedding): inv_freq as a float32 buffer, cos/sin computed in float32 and
# cast to the activations' dtype
class RotaryEmbedding(nn.Module):
    def __init__(self, dim, base=10000.0):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, x, seq_len):
        t = torch.arange(seq_len, dtype=torch.float32)
        freqs = torch.outer(t, self.inv_freq.float())
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def repeat_kv(hidden_states, n_rep):
    batch, num_key_value_heads, slen, head_dim = hidden_states.shape
    if n_rep == 1:
        return hidden_states
    hidden_states = hidden_states[:, :, None, :, :].expand(batch, num_key_value_heads, n_rep, slen, head_dim)
    return hidden_states.reshape(batch, num_key_value_heads * n_rep, slen, head_dim)  # (B, H, S, Dh)


# follows modeling_llama.py (LlamaAttention, eager path): q/k/v/o without bias, 2 key/value heads, RoPE, the
# softmax computed in float32 and cast back, the causal mask built inside
class LlamaAttention(nn.Module):
    def __init__(self, hidden_size, num_heads, num_key_value_heads=2):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = hidden_size // num_heads
        self.num_key_value_heads = num_key_value_heads
        self.num_key_value_groups = num_heads // num_key_value_heads
        self.q_proj = nn.Linear(hidden_size, num_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(hidden_size, num_key_value_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(hidden_size, num_key_value_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(num_heads * self.head_dim, hidden_size, bias=False)
        self.rotary_emb = RotaryEmbedding(self.head_dim)

    def forward(self, hidden_states):
        bsz, q_len, _ = hidden_states.size()
        q = self.q_proj(hidden_states).view(bsz, q_len, self.num_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(hidden_states).view(bsz, q_len, self.num_key_value_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(hidden_states).view(bsz, q_len, self.num_key_value_heads, self.head_dim).transpose(1, 2)
        cos, sin = self.rotary_emb(v, q_len)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = repeat_kv(k, self.num_key_value_groups)
        v = repeat_kv(v, self.num_key_value_groups)
        attn_weights = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(self.head_dim)
        causal = torch.full((q_len, q_len), torch.finfo(attn_weights.dtype).min).triu(1)
        attn_weights = attn_weights + causal
        attn_weights = F.softmax(attn_weights, dim=-1, dtype=torch.float32).to(q.dtype)
        attn_output = torch.matmul(attn_weights, v)
        attn_output = attn_output.transpose(1, 2).reshape(bsz, q_len, -1)  # (B, T, H*Dh)
        return self.o_proj(attn_output)


class LlamaMLP(nn.Module):
    def __init__(self, hidden_size, intermediate_size):
        super().__init__()
        self.gate_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.up_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


# follows modeling_llama.py (LlamaDecoderLayer): pre-norm with the float32 RMSNorm
class LlamaDecoderLayer(nn.Module):
    def __init__(self, hidden_size, num_heads):
        super().__init__()
        self.self_attn = LlamaAttention(hidden_size, num_heads)
        self.mlp = LlamaMLP(hidden_size, 4 * hidden_size)
        self.input_layernorm = LlamaRMSNorm(hidden_size)
        self.post_attention_layernorm = LlamaRMSNorm(hidden_size)

    def forward(self, hidden_states):
        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
        hidden_states = self.self_attn(hidden_states)
        hidden_states = residual + hidden_states
        residual = hidden_states
        hidden_states = self.post_attention_layernorm(hidden_states)
        hidden_states = self.mlp(hidden_states)
        return residual + hidden_states


# follows karpathy/llama2.c model.py (Attention): RoPE as real cos/sin on interleaved pairs computed on
# xq.float(), an upper-triangular -inf mask buffer, softmax(scores.float()).type_as(xq); wq/wk/wv/wo
class Llama2cAttention(nn.Module):
    def __init__(self, dim, n_heads, max_seq_len=32):
        super().__init__()
        self.n_heads = n_heads
        self.head_dim = dim // n_heads
        self.wq = nn.Linear(dim, dim, bias=False)
        self.wk = nn.Linear(dim, dim, bias=False)
        self.wv = nn.Linear(dim, dim, bias=False)
        self.wo = nn.Linear(dim, dim, bias=False)
        freqs = 1.0 / (10000.0 ** (torch.arange(0, self.head_dim, 2)[: (self.head_dim // 2)].float() / self.head_dim))
        t = torch.arange(max_seq_len, device=freqs.device)
        freqs = torch.outer(t, freqs).float()
        self.register_buffer("freqs_cos", torch.cos(freqs), persistent=False)
        self.register_buffer("freqs_sin", torch.sin(freqs), persistent=False)
        mask = torch.full((1, 1, max_seq_len, max_seq_len), float("-inf"))
        self.register_buffer("mask", torch.triu(mask, diagonal=1), persistent=False)

    @staticmethod
    def apply_rotary_emb(xq, xk, freqs_cos, freqs_sin):
        xq_r, xq_i = xq.float().reshape(xq.shape[:-1] + (-1, 2)).unbind(-1)
        xk_r, xk_i = xk.float().reshape(xk.shape[:-1] + (-1, 2)).unbind(-1)
        freqs_cos = freqs_cos[None, :, None, :]
        freqs_sin = freqs_sin[None, :, None, :]
        xq_out_r = xq_r * freqs_cos - xq_i * freqs_sin
        xq_out_i = xq_r * freqs_sin + xq_i * freqs_cos
        xk_out_r = xk_r * freqs_cos - xk_i * freqs_sin
        xk_out_i = xk_r * freqs_sin + xk_i * freqs_cos
        xq_out = torch.stack([xq_out_r, xq_out_i], dim=-1).flatten(3)
        xk_out = torch.stack([xk_out_r, xk_out_i], dim=-1).flatten(3)
        return xq_out.type_as(xq), xk_out.type_as(xk)

    def forward(self, x):
        bsz, seqlen, _ = x.shape
        xq = self.wq(x).view(bsz, seqlen, self.n_heads, self.head_dim)
        xk = self.wk(x).view(bsz, seqlen, self.n_heads, self.head_dim)
        xv = self.wv(x).view(bsz, seqlen, self.n_heads, self.head_dim)
        xq, xk = self.apply_rotary_emb(xq, xk, self.freqs_cos[:seqlen], self.freqs_sin[:seqlen])
        xq, xk, xv = xq.transpose(1, 2), xk.transpose(1, 2), xv.transpose(1, 2)  # (B, H, T, Dh)
        scores = torch.matmul(xq, xk.transpose(2, 3)) / math.sqrt(self.head_dim)
        scores = scores + self.mask[:, :, :seqlen, :seqlen]
        scores = F.softmax(scores.float(), dim=-1).type_as(xq)
        output = torch.matmul(scores, xv)
        output = output.transpose(1, 2).contiguous().view(bsz, seqlen, -1)
        return self.wo(output)


# follows meta-llama/llama llama/model.py (RMSNorm): self._norm(x.float()).type_as(x) * self.weight
class MetaRMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def _norm(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

    def forward(self, x):
        output = self._norm(x.float()).type_as(x)
        return output * self.weight


class Llama2cFeedForward(nn.Module):
    def __init__(self, dim, hidden_dim):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden_dim, bias=False)
        self.w2 = nn.Linear(hidden_dim, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden_dim, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


# follows llama2.c model.py (TransformerBlock): h = x + attention(attention_norm(x)); out = h + ffn(ffn_norm(h))
class Llama2cBlock(nn.Module):
    def __init__(self, dim, n_heads):
        super().__init__()
        self.attention = Llama2cAttention(dim, n_heads)
        self.feed_forward = Llama2cFeedForward(dim, 4 * dim)
        self.attention_norm = MetaRMSNorm(dim)
        self.ffn_norm = MetaRMSNorm(dim)

    def forward(self, x):
        h = x + self.attention.forward(self.attention_norm(x))
        return h + self.feed_forward.forward(self.ffn_norm(h))


# follows google-deepmind/gemma gemma/model.py (RMSNorm): computed on x.float(), scaled by (1 + weight)
class GemmaRMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        output = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps)
        return (output * (1.0 + self.weight.float())).type_as(x)


class GemmaBlock(nn.Module):
    def __init__(self, dim, n_heads):
        super().__init__()
        self.input_layernorm = GemmaRMSNorm(dim)
        self.self_attn = LlamaAttention(dim, n_heads)
        self.post_attention_layernorm = GemmaRMSNorm(dim)
        self.mlp = LlamaMLP(dim, 4 * dim)

    def forward(self, x):
        x = x + self.self_attn(self.input_layernorm(x))
        return x + self.mlp(self.post_attention_layernorm(x))


# follows huggingface/transformers models/falcon/modeling_falcon.py (multi_query): one fused query_key_value
# Linear giving H query heads, then ONE key head and ONE value head: (B, T, H + 2, Dh)
class FalconMultiQuery(nn.Module):
    def __init__(self, hidden_size, num_heads):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = hidden_size // num_heads
        self.query_key_value = nn.Linear(hidden_size, hidden_size + 2 * self.head_dim, bias=False)
        self.dense = nn.Linear(hidden_size, hidden_size, bias=False)

    def forward(self, hidden_states):
        b, t, _ = hidden_states.shape
        fused = self.query_key_value(hidden_states).view(b, t, self.num_heads + 2, self.head_dim)
        q = fused[..., :-2, :].transpose(1, 2)  # (B, H, T, Dh)
        k = fused[..., [-2], :].transpose(1, 2)  # (B, 1, T, Dh)
        v = fused[..., [-1], :].transpose(1, 2)
        out = F.scaled_dot_product_attention(q, k.expand_as(q), v.expand_as(q), is_causal=True)
        return self.dense(out.transpose(1, 2).reshape(b, t, -1))


# follows modeling_falcon.py (new_decoder_architecture, Falcon-40B): query_key_value interleaved per key/value
# group: (B, T, Hkv, H/Hkv + 2, Dh), the group's query heads then its key head then its value head
class FalconInterleavedGQA(nn.Module):
    def __init__(self, hidden_size, num_heads, num_kv_heads=2):
        super().__init__()
        self.num_heads = num_heads
        self.num_kv = num_kv_heads
        self.head_dim = hidden_size // num_heads
        qkv_out = (num_heads + 2 * num_kv_heads) * self.head_dim
        self.query_key_value = nn.Linear(hidden_size, qkv_out, bias=False)
        self.dense = nn.Linear(hidden_size, hidden_size, bias=False)

    def forward(self, hidden_states):
        b, t, _ = hidden_states.shape
        qkv = self.query_key_value(hidden_states)
        qkv = qkv.view(b, t, self.num_kv, self.num_heads // self.num_kv + 2, self.head_dim)  # (B, T, Hkv, G+2, Dh)
        q = qkv[:, :, :, :-2]
        k = qkv[:, :, :, [-2]].expand_as(q)
        v = qkv[:, :, :, [-1]].expand_as(q)
        q, k, v = (z.flatten(2, 3).transpose(1, 2) for z in (q, k, v))  # (B, H, T, Dh)
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim)
        scores = scores.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
        out = scores.softmax(-1) @ v
        return self.dense(out.transpose(1, 2).reshape(b, t, -1))


# follows EleutherAI/gpt-neox (and transformers' GPTNeoXAttention): query_key_value interleaved per head,
# (B, T, H, 3 * Dh) split along the last axis; norm_factor = sqrt(head_dim)
class NeoXAttention(nn.Module):
    def __init__(self, hidden_size, num_attention_heads):
        super().__init__()
        self.num_attention_heads = num_attention_heads
        self.head_size = hidden_size // num_attention_heads
        self.norm_factor = math.sqrt(self.head_size)
        self.query_key_value = nn.Linear(hidden_size, 3 * hidden_size)
        self.dense = nn.Linear(hidden_size, hidden_size)

    def forward(self, hidden_states, attention_mask=None):
        b, t, _ = hidden_states.shape
        qkv = self.query_key_value(hidden_states)
        qkv = qkv.view(b, t, self.num_attention_heads, 3 * self.head_size)  # (B, T, H, 3*Dh)
        query = qkv[..., : self.head_size].permute(0, 2, 1, 3)
        key = qkv[..., self.head_size: 2 * self.head_size].permute(0, 2, 1, 3)
        value = qkv[..., 2 * self.head_size:].permute(0, 2, 1, 3)
        scores = torch.matmul(query, key.transpose(-1, -2)) / self.norm_factor
        causal = torch.tril(torch.ones(t, t, dtype=torch.bool))
        scores = torch.where(causal, scores, torch.finfo(scores.dtype).min)
        if attention_mask is not None:
            scores = scores + attention_mask
        probs = F.softmax(scores, dim=-1)
        out = torch.matmul(probs, value).permute(0, 2, 1, 3).reshape(b, t, -1)
        return self.dense(out), probs


# injected into LlamaAttention: heads split by view without the transpose (RoPE then rotates the wrong axis)
class LlamaSplitNoTranspose(LlamaAttention):
    def forward(self, hidden_states):
        bsz, q_len, _ = hidden_states.size()
        q = self.q_proj(hidden_states).view(bsz, self.num_heads, q_len, self.head_dim)
        k = self.k_proj(hidden_states).view(bsz, self.num_key_value_heads, q_len, self.head_dim)
        v = self.v_proj(hidden_states).view(bsz, self.num_key_value_heads, q_len, self.head_dim)
        cos, sin = self.rotary_emb(v, q_len)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = repeat_kv(k, self.num_key_value_groups)
        v = repeat_kv(v, self.num_key_value_groups)
        attn_weights = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(self.head_dim)
        causal = torch.full((q_len, q_len), torch.finfo(attn_weights.dtype).min).triu(1)
        attn_weights = F.softmax(attn_weights + causal, dim=-1, dtype=torch.float32).to(q.dtype)
        attn_output = torch.matmul(attn_weights, v).transpose(1, 2).reshape(bsz, q_len, -1)
        return self.o_proj(attn_output)


# injected into llama2.c's Attention: the 1/sqrt(head_dim) dropped (the float32 upcast kept)
class Llama2cNoScale(Llama2cAttention):
    def forward(self, x):
        bsz, seqlen, _ = x.shape
        xq = self.wq(x).view(bsz, seqlen, self.n_heads, self.head_dim)
        xk = self.wk(x).view(bsz, seqlen, self.n_heads, self.head_dim)
        xv = self.wv(x).view(bsz, seqlen, self.n_heads, self.head_dim)
        xq, xk = self.apply_rotary_emb(xq, xk, self.freqs_cos[:seqlen], self.freqs_sin[:seqlen])
        xq, xk, xv = xq.transpose(1, 2), xk.transpose(1, 2), xv.transpose(1, 2)
        scores = torch.matmul(xq, xk.transpose(2, 3))
        scores = scores + self.mask[:, :, :seqlen, :seqlen]
        scores = F.softmax(scores.float(), dim=-1).type_as(xq)
        output = torch.matmul(scores, xv).transpose(1, 2).contiguous().view(bsz, seqlen, -1)
        return self.wo(output)
