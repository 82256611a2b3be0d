# Re-typed after rasbt/LLMs-from-scratch ch04/06_swa/gpt_with_kv_swa.py (at 28c65cd): the book's GPT with sliding
# window attention and a KV cache. A dict config (vocab_size, context_length, emb_dim, n_heads, n_layers, drop_rate,
# qkv_bias, sliding_window_size, sliding_window_stride: of every stride + 1 layers, stride use the window and one is
# global), the mask built from absolute query and key positions (key after query, or farther back than the window),
# -inf fill and softmax of scores / sqrt(head_dim), a cache trimmed to the window, forward(in_idx, use_cache=False)
# with the positions continuing from self.current_pos when the cache is used; the book's own LayerNorm and tanh GELU.
#   tiny_swa              correct: window 4 in the first two of every three layers (the file after
#                         rasbt/LLMs-from-scratch PR #1013, "Fix SWA").
#   tiny_swa_trim_first   real bug: the file before PR #1013 -- the new keys are appended to the cache and the cache
#                         trimmed to the window *before* attention, so a prompt longer than the window fed through
#                         the cache (chunked prefill) leaves its first queries without their keys.
import torch
import torch.nn as nn


class WindowedAttention(nn.Module):
    def __init__(self, d_in, d_out, dropout, num_heads, qkv_bias=False, window=None):
        super().__init__()
        self.d_out, self.num_heads, self.head_dim = d_out, num_heads, d_out // num_heads
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)
        self.window = window
        self.register_buffer("cache_k", None, persistent=False)
        self.register_buffer("cache_v", None, persistent=False)
        self.pos = 0

    def forward(self, x, use_cache=False):
        b, n, _ = x.shape
        split = lambda t: t.view(b, n, self.num_heads, self.head_dim)  # noqa: E731
        q, k_new, v_new = split(self.W_query(x)), split(self.W_key(x)), split(self.W_value(x))
        q_start = k_start = 0
        if use_cache:
            old = 0 if self.cache_k is None else self.cache_k.size(1)
            all_k = k_new if self.cache_k is None else torch.cat([self.cache_k, k_new], dim=1)
            all_v = v_new if self.cache_v is None else torch.cat([self.cache_v, v_new], dim=1)
            k, v = all_k, all_v
            if self.window is not None:
                keep = min(all_k.size(1), self.window + n - 1)
                k, v = all_k[:, -keep:], all_v[:, -keep:]
                stay = min(all_k.size(1), self.window)
                self.cache_k, self.cache_v = all_k[:, -stay:], all_v[:, -stay:]
            else:
                self.cache_k, self.cache_v = all_k, all_v
            k_start = (self.pos - old) + (all_k.size(1) - k.size(1))
            q_start = self.pos
            self.pos += n
        else:
            k, v = k_new, v_new
            self.pos = 0
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        scores = q @ k.transpose(2, 3)
        q_pos = torch.arange(q_start, q_start + q.shape[-2], device=x.device)
        k_pos = torch.arange(k_start, k_start + k.shape[-2], device=x.device)
        width = k.shape[-2] + 1 if self.window is None else int(self.window)
        behind = q_pos.unsqueeze(-1) - k_pos.unsqueeze(0)
        scores.masked_fill_((behind < 0) | (behind >= width), -torch.inf)
        weights = self.dropout(torch.softmax(scores / k.shape[-1] ** 0.5, dim=-1))
        return self.out_proj((weights @ v).transpose(1, 2).contiguous().view(b, n, self.d_out))

    def reset_cache(self):
        self.cache_k, self.cache_v, self.pos = None, None, 0


class LayerNorm(nn.Module):
    def __init__(self, emb_dim):
        super().__init__()
        self.eps = 1e-5
        self.scale = nn.Parameter(torch.ones(emb_dim))
        self.shift = nn.Parameter(torch.zeros(emb_dim))

    def forward(self, x):
        mean, var = x.mean(dim=-1, keepdim=True), x.var(dim=-1, keepdim=True, unbiased=False)
        return self.scale * (x - mean) / torch.sqrt(var + self.eps) + self.shift


class GELU(nn.Module):
    def forward(self, x):
        return 0.5 * x * (1 + torch.tanh(torch.sqrt(torch.tensor(2.0 / torch.pi)) * (x + 0.044715 * torch.pow(x, 3))))


class TransformerBlock(nn.Module):
    def __init__(self, cfg, window):
        super().__init__()
        d = cfg["emb_dim"]
        self.att = WindowedAttention(d, d, cfg["drop_rate"], cfg["n_heads"], cfg["qkv_bias"], window)
        self.ff = nn.Sequential(nn.Linear(d, 4 * d), GELU(), nn.Linear(4 * d, d))
        self.norm1, self.norm2 = LayerNorm(d), LayerNorm(d)
        self.drop_shortcut = nn.Dropout(cfg["drop_rate"])

    def forward(self, x, use_cache=False):
        x = x + self.drop_shortcut(self.att(self.norm1(x), use_cache=use_cache))
        return x + self.drop_shortcut(self.ff(self.norm2(x)))


class GPTModel(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.tok_emb = nn.Embedding(cfg["vocab_size"], cfg["emb_dim"])
        self.pos_emb = nn.Embedding(cfg["context_length"], cfg["emb_dim"])
        self.drop_emb = nn.Dropout(cfg["drop_rate"])
        stride = int(cfg["sliding_window_stride"])
        blocks = []
        for i in range(cfg["n_layers"]):
            windowed = stride != 0 if stride <= 0 else i % (stride + 1) < stride
            blocks.append(TransformerBlock(cfg, cfg["sliding_window_size"] if windowed else None))
        self.trf_blocks = nn.ModuleList(blocks)
        self.current_pos = 0
        self.final_norm = LayerNorm(cfg["emb_dim"])
        self.out_head = nn.Linear(cfg["emb_dim"], cfg["vocab_size"], bias=False)

    def forward(self, in_idx, use_cache=False):
        n = in_idx.shape[1]
        if use_cache:
            pos = torch.arange(self.current_pos, self.current_pos + n, device=in_idx.device)
            self.current_pos += n
        else:
            pos = torch.arange(0, n, device=in_idx.device)
        x = self.drop_emb(self.tok_emb(in_idx) + self.pos_emb(pos).unsqueeze(0))
        for block in self.trf_blocks:
            x = block(x, use_cache=use_cache)
        return self.out_head(self.final_norm(x))

    def reset_kv_cache(self):
        for block in self.trf_blocks:
            block.att.reset_cache()
        self.current_pos = 0


class WindowedAttentionTrimFirst(WindowedAttention):
    def forward(self, x, use_cache=False):
        if not use_cache:
            return super().forward(x)
        b, n, _ = x.shape
        split = lambda t: t.view(b, n, self.num_heads, self.head_dim)  # noqa: E731
        q, k_new, v_new = split(self.W_query(x)), split(self.W_key(x)), split(self.W_value(x))
        old = 0 if self.cache_k is None else self.cache_k.size(1)
        if self.cache_k is None:
            self.cache_k, self.cache_v = k_new, v_new
        else:
            self.cache_k = torch.cat([self.cache_k, k_new], dim=1)
            self.cache_v = torch.cat([self.cache_v, v_new], dim=1)
        if self.window is not None and self.cache_k.size(1) > self.window:
            self.cache_k, self.cache_v = self.cache_k[:, -self.window:], self.cache_v[:, -self.window:]
        k, v = self.cache_k, self.cache_v
        k_start = (self.pos - old) + max(0, old + n - k.size(1))
        q_start = self.pos
        self.pos += n
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        scores = q @ k.transpose(2, 3)
        q_pos = torch.arange(q_start, q_start + q.shape[-2], device=x.device)
        k_pos = torch.arange(k_start, k_start + k.shape[-2], device=x.device)
        width = k.shape[-2] + 1 if self.window is None else int(self.window)
        behind = q_pos.unsqueeze(-1) - k_pos.unsqueeze(0)
        scores.masked_fill_((behind < 0) | (behind >= width), -torch.inf)
        weights = self.dropout(torch.softmax(scores / k.shape[-1] ** 0.5, dim=-1))
        return self.out_proj((weights @ v).transpose(1, 2).contiguous().view(b, n, self.d_out))


def _tiny_cfg():
    return {"vocab_size": 50, "context_length": 16, "emb_dim": 32, "n_heads": 4, "n_layers": 3, "drop_rate": 0.0,
            "qkv_bias": False, "sliding_window_size": 4, "sliding_window_stride": 2}


def tiny_swa():
    return GPTModel(_tiny_cfg())


def tiny_swa_trim_first():
    model = GPTModel(_tiny_cfg())
    for block in model.trf_blocks:
        old = block.att
        block.att = WindowedAttentionTrimFirst(32, 32, 0.0, 4, False, old.window)
        block.att.load_state_dict(old.state_dict())
    return model
