"""中文教程风格：手写多头注意力、手写 LayerNorm（gamma/beta，BERT 的 eps=1e-12）、Post-Norm 编码器层。

The style of Chinese blog tutorials: Chinese comments, W_q/W_k/W_v/W_o, a mask (B, 1, 1, S) with 0 = padding,
a hand-written LayerNorm. Built as CLASS(d_model, n_heads).
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class MultiHeadSelfAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        assert d_model % n_heads == 0, "d_model 必须能被 n_heads 整除"
        self.d_model = d_model
        self.n_heads = n_heads
        self.d_k = d_model // n_heads  # 每个头的维度
        self.W_q = nn.Linear(d_model, d_model)
        self.W_k = nn.Linear(d_model, d_model)
        self.W_v = nn.Linear(d_model, d_model)
        self.W_o = nn.Linear(d_model, d_model)

    def split_heads(self, x):
        # (batch, seq_len, d_model) -> (batch, n_heads, seq_len, d_k)
        batch_size, seq_len, _ = x.size()
        return x.view(batch_size, seq_len, self.n_heads, self.d_k).transpose(1, 2)

    def combine_heads(self, x):
        # (batch, n_heads, seq_len, d_k) -> (batch, seq_len, d_model)
        batch_size, _, seq_len, _ = x.size()
        return x.transpose(1, 2).contiguous().view(batch_size, seq_len, self.d_model)

    def scaled_dot_product(self, Q, K, V, mask=None):
        # 缩放点积：除以 sqrt(d_k)，防止 softmax 饱和
        scores = torch.matmul(Q, K.transpose(-2, -1)) / math.sqrt(self.d_k)
        if mask is not None:
            scores = scores.masked_fill(mask == 0, -1e9)  # padding 位置填充一个很大的负数
        attn = torch.softmax(scores, dim=-1)
        return torch.matmul(attn, V), attn

    def forward(self, x, mask=None):
        Q = self.split_heads(self.W_q(x))
        K = self.split_heads(self.W_k(x))
        V = self.split_heads(self.W_v(x))
        out, attn = self.scaled_dot_product(Q, K, V, mask)
        return self.W_o(self.combine_heads(out)), attn


class ScaleByDModel(MultiHeadSelfAttention):
    def scaled_dot_product(self, Q, K, V, mask=None):
        scores = torch.matmul(Q, K.transpose(-2, -1)) / math.sqrt(self.d_model)  # 除以 sqrt(d_model)
        if mask is not None:
            scores = scores.masked_fill(mask == 0, -1e9)
        attn = torch.softmax(scores, dim=-1)
        return torch.matmul(attn, V), attn


class SplitWithoutTranspose(MultiHeadSelfAttention):
    def split_heads(self, x):
        # 直接 view 成 (batch, n_heads, seq_len, d_k)
        batch_size, seq_len, _ = x.size()
        return x.view(batch_size, self.n_heads, seq_len, self.d_k)


class MergeWithoutTranspose(MultiHeadSelfAttention):
    def combine_heads(self, x):
        batch_size, _, seq_len, _ = x.size()
        return x.contiguous().view(batch_size, seq_len, self.d_model)  # 忘了先 transpose(1, 2)


class MaskOnQueries(MultiHeadSelfAttention):
    def forward(self, x, mask=None):
        if mask is not None:
            mask = mask.transpose(-2, -1)  # (B, 1, 1, S) -> (B, 1, S, 1)：遮住了 query 行
        return super().forward(x, mask)


class MaskRepeat(MultiHeadSelfAttention):
    """mask 默认是 None，但代码直接调用 mask.repeat(...)：不传 mask 就会报错"""

    def forward(self, x, mask=None):
        Q = self.split_heads(self.W_q(x))
        K = self.split_heads(self.W_k(x))
        V = self.split_heads(self.W_v(x))
        mask = mask.repeat(1, self.n_heads, 1, 1)  # (B, 1, 1, S) -> (B, H, 1, S)
        out, attn = self.scaled_dot_product(Q, K, V, mask)
        return self.W_o(self.combine_heads(out)), attn


class TinyFill(MultiHeadSelfAttention):
    """-1e-9 而不是 -1e9：手滑写错了指数，padding 根本没有被遮住"""

    def scaled_dot_product(self, Q, K, V, mask=None):
        scores = torch.matmul(Q, K.transpose(-2, -1)) / math.sqrt(self.d_k)
        if mask is not None:
            scores = scores.masked_fill(mask == 0, -1e-9)
        attn = torch.softmax(scores, dim=-1)
        return torch.matmul(attn, V), attn


class LayerNorm(nn.Module):
    """手写 LayerNorm：对最后一维做归一化，gamma 和 beta 可学习"""

    def __init__(self, hidden_size, eps=1e-12):
        super().__init__()
        self.gamma = nn.Parameter(torch.ones(hidden_size))
        self.beta = nn.Parameter(torch.zeros(hidden_size))
        self.eps = eps

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        var = ((x - mean) ** 2).mean(-1, keepdim=True)  # 有偏方差
        return self.gamma * (x - mean) / torch.sqrt(var + self.eps) + self.beta


class FixedEpsNorm(nn.Module):
    """scale/shift 命名，eps 写死在 F.layer_norm 里"""

    def __init__(self, dim):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(dim))
        self.shift = nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        return F.layer_norm(x, x.shape[-1:], self.scale, self.shift, 1e-6)


class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff):
        super().__init__()
        self.fc1 = nn.Linear(d_model, d_ff)
        self.fc2 = nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))  # 两层全连接，中间 ReLU


class EncoderLayer(nn.Module):
    """Post-Norm 编码器层：x = norm(x + sublayer(x))"""

    def __init__(self, d_model, n_heads, attn=MultiHeadSelfAttention, norm=LayerNorm):
        super().__init__()
        self.self_attn = attn(d_model, n_heads)
        self.ffn = FeedForward(d_model, 4 * d_model)
        self.norm1 = norm(d_model)
        self.norm2 = norm(d_model)

    def forward(self, x, mask=None):
        attn_out, _ = self.self_attn(x, mask)
        x = self.norm1(x + attn_out)  # 残差 + 归一化
        x = self.norm2(x + self.ffn(x))
        return x


class AttnNoResidual(EncoderLayer):
    """注意力子层忘了残差，FFN 子层是对的"""

    def forward(self, x, mask=None):
        attn_out, _ = self.self_attn(x, mask)
        x = self.norm1(attn_out)
        x = self.norm2(x + self.ffn(x))
        return x


class PreNormLayer(EncoderLayer):
    """Pre-Norm：x = x + sublayer(norm(x))"""

    def __init__(self, d_model, n_heads, norm=FixedEpsNorm):
        super().__init__(d_model, n_heads, norm=norm)

    def forward(self, x, mask=None):
        x = x + self.self_attn(self.norm1(x), mask)[0]
        x = x + self.ffn(self.norm2(x))
        return x


class PreNormFFNWired(PreNormLayer):
    """FFN 子层里先 x = norm(x) 再加残差：Norm 落在了残差路径上（注意力子层是对的）"""

    def forward(self, x, mask=None):
        x = x + self.self_attn(self.norm1(x), mask)[0]
        x = self.norm2(x)
        x = x + self.ffn(x)
        return x


class EpsNoScale(PreNormLayer):
    """eps 不同（1e-6，写死）而且注意力没有缩放"""

    def __init__(self, d_model, n_heads):
        super().__init__(d_model, n_heads)
        self.self_attn = NoScale(d_model, n_heads)


class NoScale(MultiHeadSelfAttention):
    def scaled_dot_product(self, Q, K, V, mask=None):
        scores = torch.matmul(Q, K.transpose(-2, -1))  # 忘了缩放
        if mask is not None:
            scores = scores.masked_fill(mask == 0, -1e9)
        attn = torch.softmax(scores, dim=-1)
        return torch.matmul(attn, V), attn


class MaskRequired(MultiHeadSelfAttention):
    """mask 是必填参数，代码里直接 mask.unsqueeze(1)：传 None 就报错"""

    def forward(self, x, mask):
        Q = self.split_heads(self.W_q(x))
        K = self.split_heads(self.W_k(x))
        V = self.split_heads(self.W_v(x))
        mask = mask.unsqueeze(1).unsqueeze(2)  # (B, S) -> (B, 1, 1, S)
        out, attn = self.scaled_dot_product(Q, K, V, mask)
        return self.W_o(self.combine_heads(out)), attn


class SplitWithoutTransposeTanh(SplitWithoutTranspose):
    """拆头没有 transpose，输出还多套了一层 tanh（参考实现里没有的变化）"""

    def forward(self, x, mask=None):
        out, attn = super().forward(x, mask)
        return torch.tanh(out), attn
