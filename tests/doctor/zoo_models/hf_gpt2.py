# Re-typed after huggingface/transformers models/gpt2/modeling_gpt2.py (the eager path): GPT2Config names
# (n_embd, n_layer, n_head, n_positions), Conv1D layers whose weight is (in, out), c_attn split into q/k/v, a
# `bias` tril buffer of n_positions sliced [key_length - query_length : key_length, :key_length], past_key_values as
# per-layer (k, v) of shape (B, H, T, Dh), position_ids = arange(past_length, past_length + T), an (B, T)
# attention_mask made additive, ln_f, lm_head tied to wte, the loss shifted inside (labels = input_ids).
# Variants, each one real:
#   GPT2LMHeadUnshifted  huggingface/transformers PR #404 ("Fix Language Modeling Loss": "both loss computations
#                        were incorrect, since they computed the cross-entropy without shifting the logits").
#   GPT2PastFromHeads    dmlc/gluon-nlp issue #1015 ("prev_len in gpt.py": `prev_len = states[0].shape[1]` reads the
#                        number of heads, not the cached length, "then the positional embedding is calculated for
#                        the wrong positions"; fixed in gluon-nlp PR #1010).
#   GPT2CachePositions   ml-explore/mlx-lm PR #93 ("Fix GPT2 Incremental Generation": position embeddings were skipped
#                        for single-token inputs (`if hidden_states.shape[1] > 1`) and always started at zero,
#                        "ignoring previously generated tokens already in the KV cache"), re-typed in PyTorch.

import torch
import torch.nn.functional as F
from torch import nn


class GPT2Config:
    def __init__(self, vocab_size=50257, n_positions=1024, n_embd=768, n_layer=12, n_head=12,
                 layer_norm_epsilon=1e-5, initializer_range=0.02):
        self.vocab_size = vocab_size
        self.n_positions = n_positions
        self.n_embd = n_embd
        self.n_layer = n_layer
        self.n_head = n_head
        self.layer_norm_epsilon = layer_norm_epsilon
        self.initializer_range = initializer_range


class Conv1D(nn.Module):
    """A linear layer with its weight transposed (in_features, out_features), as GPT-2's checkpoints store it."""

    def __init__(self, nf, nx):
        super().__init__()
        self.nf = nf
        self.weight = nn.Parameter(torch.empty(nx, nf))
        self.bias = nn.Parameter(torch.zeros(nf))
        nn.init.normal_(self.weight, std=0.02)

    def forward(self, x):
        size_out = x.size()[:-1] + (self.nf,)
        x = torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight)
        return x.view(size_out)


class GPT2Attention(nn.Module):
    def __init__(self, config):
        super().__init__()
        max_positions = config.n_positions
        self.register_buffer(
            "bias",
            torch.tril(torch.ones((max_positions, max_positions), dtype=torch.bool)).view(
                1, 1, max_positions, max_positions),
            persistent=False,
        )
        self.embed_dim = config.n_embd
        self.num_heads = config.n_head
        self.head_dim = self.embed_dim // self.num_heads
        self.split_size = self.embed_dim
        self.c_attn = Conv1D(3 * self.embed_dim, self.embed_dim)
        self.c_proj = Conv1D(self.embed_dim, self.embed_dim)

    def _split_heads(self, tensor):
        new_shape = tensor.size()[:-1] + (self.num_heads, self.head_dim)
        return tensor.view(new_shape).permute(0, 2, 1, 3)  # (batch, head, seq_length, head_features)

    def _merge_heads(self, tensor):
        tensor = tensor.permute(0, 2, 1, 3).contiguous()
        return tensor.view(tensor.size()[:-2] + (self.num_heads * self.head_dim,))

    def _attn(self, query, key, value, attention_mask=None):
        attn_weights = torch.matmul(query, key.transpose(-1, -2))
        attn_weights = attn_weights / torch.full([], value.size(-1) ** 0.5, dtype=attn_weights.dtype)
        query_length, key_length = query.size(-2), key.size(-2)
        causal_mask = self.bias[:, :, key_length - query_length: key_length, :key_length]
        mask_value = torch.finfo(attn_weights.dtype).min
        mask_value = torch.full([], mask_value, dtype=attn_weights.dtype)
        attn_weights = torch.where(causal_mask, attn_weights, mask_value)
        if attention_mask is not None:
            attn_weights = attn_weights + attention_mask
        attn_weights = nn.functional.softmax(attn_weights, dim=-1)
        return torch.matmul(attn_weights, value)

    def forward(self, hidden_states, layer_past=None, attention_mask=None, use_cache=False):
        query, key, value = self.c_attn(hidden_states).split(self.split_size, dim=2)
        query = self._split_heads(query)
        key = self._split_heads(key)
        value = self._split_heads(value)
        if layer_past is not None:
            past_key, past_value = layer_past
            key = torch.cat((past_key, key), dim=-2)
            value = torch.cat((past_value, value), dim=-2)
        present = (key, value) if use_cache else None
        attn_output = self._attn(query, key, value, attention_mask)
        attn_output = self._merge_heads(attn_output)
        return self.c_proj(attn_output), present


class GPT2MLP(nn.Module):
    def __init__(self, intermediate_size, config):
        super().__init__()
        self.c_fc = Conv1D(intermediate_size, config.n_embd)
        self.c_proj = Conv1D(config.n_embd, intermediate_size)

    def forward(self, hidden_states):
        return self.c_proj(F.gelu(self.c_fc(hidden_states), approximate="tanh"))


class GPT2Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        hidden_size = config.n_embd
        self.ln_1 = nn.LayerNorm(hidden_size, eps=config.layer_norm_epsilon)
        self.attn = GPT2Attention(config)
        self.ln_2 = nn.LayerNorm(hidden_size, eps=config.layer_norm_epsilon)
        self.mlp = GPT2MLP(4 * hidden_size, config)

    def forward(self, hidden_states, layer_past=None, attention_mask=None, use_cache=False):
        residual = hidden_states
        attn_output, present = self.attn(
            self.ln_1(hidden_states), layer_past=layer_past, attention_mask=attention_mask, use_cache=use_cache)
        hidden_states = attn_output + residual
        residual = hidden_states
        hidden_states = residual + self.mlp(self.ln_2(hidden_states))
        return hidden_states, present


class GPT2LMHeadModel(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.n_positions, config.n_embd)
        self.h = nn.ModuleList([GPT2Block(config) for _ in range(config.n_layer)])
        self.ln_f = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight  # tie_weights()
        nn.init.normal_(self.wte.weight, std=config.initializer_range)
        nn.init.normal_(self.wpe.weight, std=config.initializer_range)

    def past_length(self, past_key_values):
        return 0 if past_key_values is None else past_key_values[0][0].size(-2)

    def embed(self, input_ids, past_key_values):
        past_length = self.past_length(past_key_values)
        position_ids = torch.arange(past_length, input_ids.size(-1) + past_length, dtype=torch.long,
                                    device=input_ids.device).unsqueeze(0)
        return self.wte(input_ids) + self.wpe(position_ids)

    def loss(self, lm_logits, labels):
        # Shift so that tokens < n predict n
        shift_logits = lm_logits[..., :-1, :].contiguous()
        shift_labels = labels[..., 1:].contiguous()
        return F.cross_entropy(shift_logits.view(-1, shift_logits.size(-1)), shift_labels.view(-1))

    def forward(self, input_ids, past_key_values=None, attention_mask=None, labels=None, use_cache=False):
        if attention_mask is not None:
            attention_mask = attention_mask[:, None, None, :].to(torch.float32)
            attention_mask = (1.0 - attention_mask) * torch.finfo(torch.float32).min
        hidden_states = self.embed(input_ids, past_key_values)
        presents = [] if use_cache else None
        for i, block in enumerate(self.h):
            layer_past = past_key_values[i] if past_key_values is not None else None
            hidden_states, present = block(hidden_states, layer_past, attention_mask, use_cache)
            if use_cache:
                presents.append(present)
        hidden_states = self.ln_f(hidden_states)
        lm_logits = self.lm_head(hidden_states)
        if use_cache:
            return lm_logits, presents
        loss = self.loss(lm_logits, labels) if labels is not None else None
        return lm_logits, loss

    @torch.no_grad()
    def generate(self, input_ids, max_new_tokens=20, do_sample=False):
        logits, past = self(input_ids, use_cache=True)
        for _ in range(max_new_tokens):
            next_logits = logits[:, -1, :]
            if do_sample:
                next_tokens = torch.multinomial(F.softmax(next_logits, dim=-1), num_samples=1)
            else:
                next_tokens = next_logits.argmax(dim=-1, keepdim=True)
            input_ids = torch.cat([input_ids, next_tokens], dim=-1)
            logits, past = self(next_tokens, past_key_values=past, use_cache=True)
        return input_ids


class GPT2LMHeadUnshifted(GPT2LMHeadModel):
    def loss(self, lm_logits, labels):
        return F.cross_entropy(lm_logits.view(-1, lm_logits.size(-1)), labels.view(-1), ignore_index=-1)


class GPT2PastFromHeads(GPT2LMHeadModel):
    def past_length(self, past_key_values):
        return 0 if past_key_values is None else past_key_values[0][0].shape[1]


class GPT2CachePositions(GPT2LMHeadModel):
    def embed(self, input_ids, past_key_values):
        hidden_states = self.wte(input_ids)
        if hidden_states.shape[1] > 1:
            position_ids = torch.arange(hidden_states.shape[1], device=input_ids.device)
            hidden_states = hidden_states + self.wpe(position_ids)
        return hidden_states
