# Re-typed after huggingface/transformers models/xglm/modeling_xglm.py (fairseq lineage): XGLMConfig (d_model,
# num_layers, attention_heads, ffn_dim, max_position_embeddings, scale_embedding, pad_token_id=1), token embeddings
# times embed_scale = sqrt(d_model) once, a fixed sinusoidal table with an offset of 2 and pad-aware position ids
# (cumsum of the non-pad mask + past length; pads sit at padding_idx), q scaled by head_dim ** -0.5 before q @ k,
# pre-LayerNorm layers, a final layer_norm, lm_head tied to embed_tokens, past_key_values, labels shifted inside.
#   XGLMForCausalLM       the file after the fix.
#   XGLMPastIgnored       real bug: huggingface/transformers PR #15751 ("[M2M100, XGLM] fix
#                         create_position_ids_from_inputs_embeds": the position ids did not use past_key_values_length,
#                         "which creates issues in generation when use_cache=True"; issue #15736): every decoding step
#                         through the cache gets the first position again.
import math

import torch
import torch.nn.functional as F
from torch import nn


class XGLMConfig:
    def __init__(self, vocab_size=256008, max_position_embeddings=2048, d_model=1024, ffn_dim=4096, num_layers=24,
                 attention_heads=16, scale_embedding=True, pad_token_id=1):
        self.vocab_size = vocab_size
        self.max_position_embeddings = max_position_embeddings
        self.d_model = d_model
        self.ffn_dim = ffn_dim
        self.num_layers = num_layers
        self.attention_heads = attention_heads
        self.scale_embedding = scale_embedding
        self.pad_token_id = pad_token_id


class XGLMSinusoidalPositionalEmbedding(nn.Module):
    """Fixed sinusoids; row padding_idx is zero and real positions start at padding_idx + 1."""

    def __init__(self, num_positions, embedding_dim, padding_idx):
        super().__init__()
        self.offset = 2
        self.embedding_dim = embedding_dim
        self.padding_idx = padding_idx
        half_dim = embedding_dim // 2
        emb = math.log(10000) / (half_dim - 1)
        emb = torch.exp(torch.arange(half_dim, dtype=torch.float) * -emb)
        emb = torch.arange(num_positions + self.offset, dtype=torch.float).unsqueeze(1) * emb.unsqueeze(0)
        emb = torch.cat([torch.sin(emb), torch.cos(emb)], dim=1).view(num_positions + self.offset, -1)
        if embedding_dim % 2 == 1:
            emb = torch.cat([emb, torch.zeros(num_positions + self.offset, 1)], dim=1)
        emb[padding_idx, :] = 0
        self.register_buffer("weights", emb, persistent=False)

    def forward(self, position_ids):
        bsz, seq_len = position_ids.size()
        return self.weights.index_select(0, position_ids.view(-1)).view(bsz, seq_len, -1)


def create_position_ids_from_input_ids(input_ids, padding_idx, past_key_values_length=0):
    mask = input_ids.ne(padding_idx).int()
    incremental_indices = (torch.cumsum(mask, dim=1).type_as(mask) + past_key_values_length) * mask
    return incremental_indices.long() + padding_idx


class XGLMAttention(nn.Module):
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

    def _shape(self, tensor, seq_len, bsz):
        return tensor.view(bsz, seq_len, self.num_heads, self.head_dim).transpose(1, 2).contiguous()

    def forward(self, hidden_states, past_key_value=None, attention_mask=None):
        bsz, tgt_len, _ = hidden_states.size()
        query_states = self._shape(self.q_proj(hidden_states) * self.scaling, tgt_len, bsz)
        key_states = self._shape(self.k_proj(hidden_states), -1, bsz)
        value_states = self._shape(self.v_proj(hidden_states), -1, bsz)
        if past_key_value is not None:
            key_states = torch.cat([past_key_value[0], key_states], dim=2)
            value_states = torch.cat([past_key_value[1], value_states], dim=2)
        past_key_value = (key_states, value_states)
        attn_weights = torch.matmul(query_states, key_states.transpose(2, 3))
        attn_weights = attn_weights + attention_mask
        attn_weights = F.softmax(attn_weights, dim=-1)
        attn_output = torch.matmul(attn_weights, value_states)
        attn_output = attn_output.transpose(1, 2).reshape(bsz, tgt_len, self.embed_dim)
        return self.out_proj(attn_output), past_key_value


class XGLMDecoderLayer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.embed_dim = config.d_model
        self.self_attn = XGLMAttention(self.embed_dim, config.attention_heads)
        self.self_attn_layer_norm = nn.LayerNorm(self.embed_dim)
        self.fc1 = nn.Linear(self.embed_dim, config.ffn_dim)
        self.fc2 = nn.Linear(config.ffn_dim, self.embed_dim)
        self.final_layer_norm = nn.LayerNorm(self.embed_dim)

    def forward(self, hidden_states, attention_mask, past_key_value=None):
        residual = hidden_states
        hidden_states = self.self_attn_layer_norm(hidden_states)
        hidden_states, present = self.self_attn(hidden_states, past_key_value, attention_mask)
        hidden_states = residual + hidden_states
        residual = hidden_states
        hidden_states = self.final_layer_norm(hidden_states)
        hidden_states = self.fc2(F.gelu(self.fc1(hidden_states)))
        hidden_states = residual + hidden_states
        return hidden_states, present


class XGLMForCausalLM(nn.Module):
    def __init__(self, config: XGLMConfig):
        super().__init__()
        self.config = config
        self.padding_idx = config.pad_token_id
        self.embed_scale = math.sqrt(config.d_model) if config.scale_embedding else 1.0
        self.embed_tokens = nn.Embedding(config.vocab_size, config.d_model, self.padding_idx)
        self.embed_positions = XGLMSinusoidalPositionalEmbedding(
            config.max_position_embeddings, config.d_model, config.pad_token_id)
        self.layers = nn.ModuleList([XGLMDecoderLayer(config) for _ in range(config.num_layers)])
        self.layer_norm = nn.LayerNorm(config.d_model)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.lm_head.weight = self.embed_tokens.weight
        nn.init.normal_(self.embed_tokens.weight, std=config.d_model ** -0.5)

    def position_ids(self, input_ids, past_key_values_length):
        return create_position_ids_from_input_ids(input_ids, self.padding_idx, past_key_values_length)

    def forward(self, input_ids, attention_mask=None, past_key_values=None, labels=None, use_cache=False):
        bsz, tgt_len = input_ids.shape
        past_len = past_key_values[0][0].shape[2] if past_key_values is not None else 0
        # causal mask over (tgt_len, past_len + tgt_len), plus the padding mask on keys
        mask = torch.full((tgt_len, tgt_len), torch.finfo(torch.float32).min).triu(1)
        mask = torch.cat([torch.zeros(tgt_len, past_len), mask], dim=-1)[None, None]
        if attention_mask is not None:
            mask = mask + (1.0 - attention_mask[:, None, None, :].float()) * torch.finfo(torch.float32).min
        hidden_states = self.embed_tokens(input_ids) * self.embed_scale
        hidden_states = hidden_states + self.embed_positions(self.position_ids(input_ids, past_len))
        presents = []
        for idx, decoder_layer in enumerate(self.layers):
            past = past_key_values[idx] if past_key_values is not None else None
            hidden_states, present = decoder_layer(hidden_states, mask, past)
            presents.append(present)
        hidden_states = self.layer_norm(hidden_states)
        logits = self.lm_head(hidden_states)
        if use_cache:
            return logits, presents
        loss = None
        if labels is not None:
            shift_labels = labels.new_zeros(labels.shape)
            shift_labels[:, :-1] = labels[:, 1:].clone()
            shift_labels[:, -1] = self.config.pad_token_id
            loss = F.cross_entropy(logits.view(-1, self.config.vocab_size), shift_labels.view(-1),
                                   ignore_index=self.config.pad_token_id)
        return logits, loss

    @torch.no_grad()
    def generate(self, input_ids, max_new_tokens=20):
        logits, past = self(input_ids, use_cache=True)
        for _ in range(max_new_tokens):
            next_tokens = logits[:, -1, :].argmax(dim=-1, keepdim=True)
            input_ids = torch.cat([input_ids, next_tokens], dim=-1)
            logits, past = self(next_tokens, past_key_values=past, use_cache=True)
        return input_ids


class XGLMPastIgnored(XGLMForCausalLM):
    def position_ids(self, input_ids, past_key_values_length):
        return create_position_ids_from_input_ids(input_ids, self.padding_idx)
