# Re-typed after rasbt/LLMs-from-scratch pkg/llms_from_scratch/qwen3.py (at 28c65cd), the book's from-scratch Qwen3:
# a plain dict config (vocab_size, context_length, emb_dim, n_heads, n_layers, hidden_dim, head_dim given apart from
# emb_dim/n_heads, qk_norm, n_kv_groups, rope_base, dtype) whose "dtype" the embedding and the head are made in and the
# final hidden states are cast to (`x.to(self.cfg["dtype"])`), RMSNorm computed in float32 (Qwen3's, with an optional
# shift), rotate-half RoPE from precomputed cos/sin buffers, grouped-query attention with RMSNorm on each head's q and
# k, a bool triu mask filled with -inf, SwiGLU, and for the MoE configs a router picking the top-k experts per token.
#   tiny_qwen3       correct. Before the doctor reran the ops its float32 cast makes fail on float64 tensors, it was
#                    refused ("expected m1 and m2 to have the same dtype").
#   tiny_qwen3_moe   correct: the same with a mixture-of-experts FFN (4 experts, 2 per token).
import torch
from torch import nn


def rope_params(head_dim, theta_base=10_000, context_length=4096, dtype=torch.float32):
    inv_freq = 1.0 / (theta_base ** (torch.arange(0, head_dim, 2, dtype=dtype)[: head_dim // 2].float() / head_dim))
    angles = torch.arange(context_length, dtype=dtype)[:, None] * inv_freq[None, :]
    angles = torch.cat([angles, angles], dim=1)
    return torch.cos(angles), torch.sin(angles)


def apply_rope(x, cos, sin):
    _, _, seq_len, head_dim = x.shape
    x1, x2 = x[..., : head_dim // 2], x[..., head_dim // 2:]
    cos, sin = cos[:seq_len, :].unsqueeze(0).unsqueeze(0), sin[:seq_len, :].unsqueeze(0).unsqueeze(0)
    rotated = torch.cat((-x2, x1), dim=-1)
    return (x * cos + rotated * sin).to(dtype=x.dtype)


class RMSNorm(nn.Module):
    def __init__(self, emb_dim, eps=1e-6, bias=False, qwen3_compatible=True):
        super().__init__()
        self.eps, self.qwen3_compatible = eps, qwen3_compatible
        self.scale = nn.Parameter(torch.ones(emb_dim))
        self.shift = nn.Parameter(torch.zeros(emb_dim)) if bias else None

    def forward(self, x):
        input_dtype = x.dtype
        if self.qwen3_compatible:
            x = x.to(torch.float32)
        norm_x = x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps) * self.scale
        if self.shift is not None:
            norm_x = norm_x + self.shift
        return norm_x.to(input_dtype)


class GroupedQueryAttention(nn.Module):
    def __init__(self, d_in, num_heads, num_kv_groups, head_dim=None, qk_norm=False, dtype=None):
        super().__init__()
        assert num_heads % num_kv_groups == 0
        self.num_heads, self.num_kv_groups = num_heads, num_kv_groups
        self.group_size = num_heads // num_kv_groups
        self.head_dim = head_dim if head_dim is not None else d_in // num_heads
        self.d_out = num_heads * self.head_dim
        self.W_query = nn.Linear(d_in, self.d_out, bias=False, dtype=dtype)
        self.W_key = nn.Linear(d_in, num_kv_groups * self.head_dim, bias=False, dtype=dtype)
        self.W_value = nn.Linear(d_in, num_kv_groups * self.head_dim, bias=False, dtype=dtype)
        self.out_proj = nn.Linear(self.d_out, d_in, bias=False, dtype=dtype)
        self.q_norm = RMSNorm(self.head_dim, eps=1e-6) if qk_norm else None
        self.k_norm = RMSNorm(self.head_dim, eps=1e-6) if qk_norm else None

    def forward(self, x, mask, cos, sin):
        b, n, _ = x.shape
        q = self.W_query(x).view(b, n, self.num_heads, self.head_dim).transpose(1, 2)
        k = self.W_key(x).view(b, n, self.num_kv_groups, self.head_dim).transpose(1, 2)
        v = self.W_value(x).view(b, n, self.num_kv_groups, self.head_dim).transpose(1, 2)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        k = k.repeat_interleave(self.group_size, dim=1)
        v = v.repeat_interleave(self.group_size, dim=1)
        scores = (q @ k.transpose(2, 3)).masked_fill(mask, -torch.inf)
        weights = torch.softmax(scores / self.head_dim ** 0.5, dim=-1)
        return self.out_proj((weights @ v).transpose(1, 2).reshape(b, n, self.d_out))


class FeedForward(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.fc1 = nn.Linear(cfg["emb_dim"], cfg["hidden_dim"], dtype=cfg["dtype"], bias=False)
        self.fc2 = nn.Linear(cfg["emb_dim"], cfg["hidden_dim"], dtype=cfg["dtype"], bias=False)
        self.fc3 = nn.Linear(cfg["hidden_dim"], cfg["emb_dim"], dtype=cfg["dtype"], bias=False)

    def forward(self, x):
        return self.fc3(nn.functional.silu(self.fc1(x)) * self.fc2(x))


class MoEFeedForward(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.k, self.n = cfg["num_experts_per_tok"], cfg["num_experts"]
        d, h = cfg["emb_dim"], cfg["moe_intermediate_size"]
        self.gate = nn.Linear(d, self.n, bias=False, dtype=cfg["dtype"])
        self.fc1 = nn.ModuleList([nn.Linear(d, h, bias=False, dtype=cfg["dtype"]) for _ in range(self.n)])
        self.fc2 = nn.ModuleList([nn.Linear(d, h, bias=False, dtype=cfg["dtype"]) for _ in range(self.n)])
        self.fc3 = nn.ModuleList([nn.Linear(h, d, bias=False, dtype=cfg["dtype"]) for _ in range(self.n)])

    def forward(self, x):
        top_scores, top_idx = torch.topk(self.gate(x), self.k, dim=-1)
        top_probs = torch.softmax(top_scores, dim=-1)
        b, t, d = x.shape
        flat, idx, probs = x.reshape(b * t, d), top_idx.reshape(b * t, self.k), top_probs.reshape(b * t, self.k)
        out = torch.zeros(b * t, d, device=x.device, dtype=x.dtype)
        for e in torch.unique(idx).tolist():
            rows, slot = (idx == e).nonzero(as_tuple=True)
            h = nn.functional.silu(self.fc1[e](flat[rows])) * self.fc2[e](flat[rows])
            out.index_add_(0, rows, self.fc3[e](h) * probs[rows, slot].unsqueeze(-1))
        return out.reshape(b, t, d)


class TransformerBlock(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.att = GroupedQueryAttention(cfg["emb_dim"], cfg["n_heads"], cfg["n_kv_groups"], cfg["head_dim"],
                                         cfg["qk_norm"], cfg["dtype"])
        self.ff = MoEFeedForward(cfg) if cfg.get("num_experts", 0) > 0 else FeedForward(cfg)
        self.norm1, self.norm2 = RMSNorm(cfg["emb_dim"], eps=1e-6), RMSNorm(cfg["emb_dim"], eps=1e-6)

    def forward(self, x, mask, cos, sin):
        x = x + self.att(self.norm1(x), mask, cos, sin)
        return x + self.ff(self.norm2(x))


class Qwen3Model(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.tok_emb = nn.Embedding(cfg["vocab_size"], cfg["emb_dim"], dtype=cfg["dtype"])
        self.trf_blocks = nn.ModuleList([TransformerBlock(cfg) for _ in range(cfg["n_layers"])])
        self.final_norm = RMSNorm(cfg["emb_dim"])
        self.out_head = nn.Linear(cfg["emb_dim"], cfg["vocab_size"], bias=False, dtype=cfg["dtype"])
        head_dim = cfg["head_dim"] if cfg["head_dim"] is not None else cfg["emb_dim"] // cfg["n_heads"]
        cos, sin = rope_params(head_dim, cfg["rope_base"], cfg["context_length"])
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        self.cfg = cfg

    def forward(self, in_idx):
        x = self.tok_emb(in_idx)
        n = x.shape[1]
        mask = torch.triu(torch.ones(n, n, device=x.device, dtype=torch.bool), diagonal=1)
        for block in self.trf_blocks:
            x = block(x, mask, self.cos, self.sin)
        return self.out_head(self.final_norm(x).to(self.cfg["dtype"]))


def _tiny(**more):
    return {"vocab_size": 50, "context_length": 16, "emb_dim": 32, "n_heads": 4, "n_layers": 2, "hidden_dim": 64,
            "head_dim": 8, "qk_norm": True, "n_kv_groups": 2, "rope_base": 1_000_000.0, "dtype": torch.float32,
            **more}


def tiny_qwen3():
    return Qwen3Model(_tiny())


def tiny_qwen3_moe():
    return Qwen3Model(_tiny(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16))
