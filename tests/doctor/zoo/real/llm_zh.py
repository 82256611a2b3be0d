"""中文大模型教程里的注意力与解码层（按原仓库的结构用我们自己的话重写：保留关键写法，不照抄代码）。
Chinese LLM tutorials' attention and decoder layers, re-typed in our own words. Built as ``CLASS(d_model, n_heads)``."""

import math

import torch
import torch.nn.functional as F
from torch import nn


# 参照 jingyaogong/minimind model/model_minimind.py 的 RMSNorm：先转 float32 计算，再 type_as 转回
class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def _norm(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

    def forward(self, x):
        return self.weight * self._norm(x.float()).type_as(x)


# 参照 minimind 的 precompute_freqs_cis：频率表用 float32 预先算好（cos、sin 两张表，长度 end）
def precompute_freqs(dim, end=32, theta=1e6):
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: (dim // 2)].float() / dim))
    t = torch.arange(end, device=freqs.device).float()
    freqs = torch.outer(t, freqs)
    freqs_cos = torch.cat([torch.cos(freqs), torch.cos(freqs)], dim=-1)
    freqs_sin = torch.cat([torch.sin(freqs), torch.sin(freqs)], dim=-1)
    return freqs_cos, freqs_sin


def apply_rotary_pos_emb(q, k, cos, sin):
    def rotate_half(x):
        return torch.cat((-x[..., x.shape[-1] // 2:], x[..., : x.shape[-1] // 2]), dim=-1)

    q_embed = (q * cos.unsqueeze(1)) + (rotate_half(q) * sin.unsqueeze(1))
    k_embed = (k * cos.unsqueeze(1)) + (rotate_half(k) * sin.unsqueeze(1))
    return q_embed, k_embed


def repeat_kv(x, n_rep):
    bs, slen, num_key_value_heads, head_dim = x.shape
    if n_rep == 1:
        return x
    return (x[:, :, :, None, :].expand(bs, slen, num_key_value_heads, n_rep, head_dim)
            .reshape(bs, slen, num_key_value_heads * n_rep, head_dim))  # (B, T, H, Dh)


# 参照 minimind 的 Attention：q/k/v/o 投影，2 个 kv 头，RoPE 表是 float32 buffer（按输入切片），
# 因果 mask 用 triu(-inf)，scores.float() 后 softmax 再 type_as 转回
class MiniMindAttention(nn.Module):
    def __init__(self, dim, n_heads, n_kv_heads=2):
        super().__init__()
        self.n_local_heads = n_heads
        self.n_local_kv_heads = n_kv_heads
        self.n_rep = n_heads // n_kv_heads
        self.head_dim = dim // n_heads
        self.q_proj = nn.Linear(dim, n_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(dim, n_kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(dim, n_kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(n_heads * self.head_dim, dim, bias=False)
        cos, sin = precompute_freqs(self.head_dim)
        self.register_buffer("freqs_cos", cos, persistent=False)
        self.register_buffer("freqs_sin", sin, persistent=False)

    def forward(self, x):
        bsz, seq_len, _ = x.shape
        xq, xk, xv = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        xq = xq.view(bsz, seq_len, self.n_local_heads, self.head_dim)
        xk = xk.view(bsz, seq_len, self.n_local_kv_heads, self.head_dim)
        xv = xv.view(bsz, seq_len, self.n_local_kv_heads, self.head_dim)
        # RoPE：按 (B, T, H, Dh) 排布，cos/sin 取前 seq_len 个位置
        xq, xk = apply_rotary_pos_emb(xq, xk, self.freqs_cos[:seq_len], self.freqs_sin[:seq_len])
        xq, xk, xv = (xq.transpose(1, 2), repeat_kv(xk, self.n_rep).transpose(1, 2),
                      repeat_kv(xv, self.n_rep).transpose(1, 2))  # (B, H, T, Dh)
        scores = (xq @ xk.transpose(-2, -1)) / math.sqrt(self.head_dim)
        scores = scores + torch.triu(torch.full((seq_len, seq_len), float("-inf"), device=scores.device),
                                     diagonal=1).unsqueeze(0).unsqueeze(0)
        scores = F.softmax(scores.float(), dim=-1).type_as(xq)
        output = scores @ xv
        output = output.transpose(1, 2).reshape(bsz, seq_len, -1)
        return self.o_proj(output)


class FeedForward(nn.Module):
    def __init__(self, dim, hidden_dim):
        super().__init__()
        self.gate_proj = nn.Linear(dim, hidden_dim, bias=False)
        self.down_proj = nn.Linear(hidden_dim, dim, bias=False)
        self.up_proj = nn.Linear(dim, hidden_dim, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


# 参照 minimind 的 MiniMindBlock：pre-norm，两个 RMSNorm（float32 计算）
class MiniMindBlock(nn.Module):
    def __init__(self, dim, n_heads):
        super().__init__()
        self.self_attn = MiniMindAttention(dim, n_heads)
        self.input_layernorm = RMSNorm(dim)
        self.post_attention_layernorm = RMSNorm(dim)
        self.mlp = FeedForward(dim, 4 * dim)

    def forward(self, hidden_states):
        residual = hidden_states
        hidden_states = self.self_attn(self.input_layernorm(hidden_states))
        hidden_states += residual
        hidden_states = hidden_states + self.mlp(self.post_attention_layernorm(hidden_states))
        return hidden_states


# 参照 graykode/nlp-tutorial 5-1.Transformer 的 MultiHeadAttention：forward(Q, K, V, attn_mask)，
# attn_mask 是 (B, len_q, len_k) 的 bool，True 表示 padding（get_attn_pad_mask），masked_fill_(attn_mask, -1e9)；
# 这里去掉了原文在 forward 里新建的 LayerNorm，只保留注意力本身
class NlpTutorialAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads = n_heads
        self.d_k = self.d_v = d_model // n_heads
        self.W_Q = nn.Linear(d_model, self.d_k * n_heads)
        self.W_K = nn.Linear(d_model, self.d_k * n_heads)
        self.W_V = nn.Linear(d_model, self.d_v * n_heads)
        self.linear = nn.Linear(n_heads * self.d_v, d_model)

    def forward(self, Q, K, V, attn_mask):
        batch_size = Q.size(0)
        q_s = self.W_Q(Q).view(batch_size, -1, self.n_heads, self.d_k).transpose(1, 2)  # (B, H, T, Dk)
        k_s = self.W_K(K).view(batch_size, -1, self.n_heads, self.d_k).transpose(1, 2)
        v_s = self.W_V(V).view(batch_size, -1, self.n_heads, self.d_v).transpose(1, 2)
        attn_mask = attn_mask.unsqueeze(1).repeat(1, self.n_heads, 1, 1)  # (B, H, T, S)
        scores = torch.matmul(q_s, k_s.transpose(-1, -2)) / math.sqrt(self.d_k)
        scores.masked_fill_(attn_mask, -1e9)
        attn = nn.Softmax(dim=-1)(scores)
        context = torch.matmul(attn, v_s)
        context = context.transpose(1, 2).contiguous().view(batch_size, -1, self.n_heads * self.d_v)
        return self.linear(context), attn


# 中文博客里常见的写法：forward(self, x, key_padding_mask=None)，key_padding_mask (B, S) True = padding，
# 用 float('-inf') 填充
class ZhKeyPaddingAttention(nn.Module):
    def __init__(self, d_model, num_heads):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = d_model // num_heads
        self.qkv_proj = nn.Linear(d_model, 3 * d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def forward(self, x, key_padding_mask=None):
        b, t, d = x.shape
        q, k, v = self.qkv_proj(x).split(d, dim=-1)
        q = q.view(b, t, self.num_heads, self.head_dim).transpose(1, 2)  # (B, H, T, Dh)
        k = k.view(b, t, self.num_heads, self.head_dim).transpose(1, 2)
        v = v.view(b, t, self.num_heads, self.head_dim).transpose(1, 2)
        attn = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        if key_padding_mask is not None:
            attn = attn.masked_fill(key_padding_mask[:, None, None, :], float("-inf"))
        attn = attn.softmax(dim=-1)
        out = (attn @ v).transpose(1, 2).reshape(b, t, d)  # (B, T, D)
        return self.out_proj(out)


# 注入的错误（injected）：key_padding_mask 被扩成 (B, 1, T, 1)，遮住的是 query 行而不是 key 列
class ZhKeyPaddingOnQueries(ZhKeyPaddingAttention):
    def forward(self, x, key_padding_mask=None):
        b, t, d = x.shape
        q, k, v = self.qkv_proj(x).split(d, dim=-1)
        q = q.view(b, t, self.num_heads, self.head_dim).transpose(1, 2)
        k = k.view(b, t, self.num_heads, self.head_dim).transpose(1, 2)
        v = v.view(b, t, self.num_heads, self.head_dim).transpose(1, 2)
        attn = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        if key_padding_mask is not None:
            attn = attn.masked_fill(key_padding_mask[:, None, :, None], -1e9)
        attn = attn.softmax(dim=-1)
        out = (attn @ v).transpose(1, 2).reshape(b, t, d)
        return self.out_proj(out)


# 注入的错误（injected）：softmax 之后才用 -inf 填充被遮住的位置（-inf 乘 v 得到 NaN）
class ZhMaskAfterSoftmaxInf(ZhKeyPaddingAttention):
    def forward(self, x, key_padding_mask=None):
        b, t, d = x.shape
        q, k, v = self.qkv_proj(x).split(d, dim=-1)
        q = q.view(b, t, self.num_heads, self.head_dim).transpose(1, 2)
        k = k.view(b, t, self.num_heads, self.head_dim).transpose(1, 2)
        v = v.view(b, t, self.num_heads, self.head_dim).transpose(1, 2)
        attn = (q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)).softmax(dim=-1)
        if key_padding_mask is not None:
            attn = attn.masked_fill(key_padding_mask[:, None, None, :], float("-inf"))
        out = (attn @ v).transpose(1, 2).reshape(b, t, d)
        return self.out_proj(out)


# 中文教程的 Qwen 风格注意力：q/k/v 带偏置、o 不带偏置，softmax 用 dtype=torch.float32
class QwenStyleAttention(nn.Module):
    def __init__(self, hidden_size, num_heads):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = hidden_size // num_heads
        self.q_proj = nn.Linear(hidden_size, hidden_size, bias=True)
        self.k_proj = nn.Linear(hidden_size, hidden_size, bias=True)
        self.v_proj = nn.Linear(hidden_size, hidden_size, bias=True)
        self.o_proj = nn.Linear(hidden_size, hidden_size, bias=False)
        cos, sin = precompute_freqs(self.head_dim, theta=1e6)
        self.register_buffer("cos_cached", cos, persistent=False)
        self.register_buffer("sin_cached", sin, persistent=False)

    def forward(self, hidden_states, attention_mask=None):
        bsz, q_len, _ = hidden_states.size()
        q = self.q_proj(hidden_states).view(bsz, q_len, self.num_heads, self.head_dim)
        k = self.k_proj(hidden_states).view(bsz, q_len, self.num_heads, self.head_dim)
        v = self.v_proj(hidden_states).view(bsz, q_len, self.num_heads, self.head_dim).transpose(1, 2)
        q, k = apply_rotary_pos_emb(q, k, self.cos_cached[:q_len], self.sin_cached[:q_len])
        q, k = q.transpose(1, 2), k.transpose(1, 2)  # (B, H, T, Dh)
        attn_weights = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(self.head_dim)
        if attention_mask is not None:  # 加性 mask：(B, 1, T, S)，0 或很大的负数
            attn_weights = attn_weights + attention_mask
        attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32).to(q.dtype)
        attn_output = torch.matmul(attn_weights, v).transpose(1, 2).reshape(bsz, q_len, -1)
        return self.o_proj(attn_output)


# 注入的错误（injected）：Post-Norm 编码层忘了注意力子层的残差（FFN 子层的残差还在）
class ZhPostNormNoResidual(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.attn = ZhKeyPaddingAttention(d_model, n_heads)
        self.norm1 = nn.LayerNorm(d_model)
        self.ffn = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.ReLU(), nn.Linear(4 * d_model, d_model))
        self.norm2 = nn.LayerNorm(d_model)

    def forward(self, x, key_padding_mask=None):
        x = self.norm1(self.attn(x, key_padding_mask))  # 这里少了 x +
        x = self.norm2(x + self.ffn(x))
        return x
