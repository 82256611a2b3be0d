# Re-typed after NVIDIA NeMo nemo/collections/nlp/modules/common/transformer/transformer_decoders.py used as a
# decoder-only language model (its TransformerLMModel): a `pre_ln` switch on each layer, learned position embeddings
# in a TransformerEmbedding module (token + position, LayerNorm, dropout), a causal mask built from the length and
# handed to every layer, an untied log-softmax-free head (TokenClassifier's last Linear), positional sizes
# (vocab_size, hidden_size, num_attention_heads, num_layers, max_sequence_length).
#   NemoLM               the stack after NVIDIA/NeMo PR #2197 ("Fix/Add final layer norm for pre_ln transformer
#                        encoder and decoder": with pre_ln=True the last layer's residual stream goes through one
#                        more LayerNorm).
#   NemoLMNoFinalNorm    real bug: the stack before PR #2197 -- pre-LN layers and no final LayerNorm before the head.
import math

import torch
import torch.nn.functional as F
from torch import nn


class TransformerEmbedding(nn.Module):
    def __init__(self, vocab_size, hidden_size, max_sequence_length=512, embedding_dropout=0.0):
        super().__init__()
        self.token_embedding = nn.Embedding(vocab_size, hidden_size)
        self.position_embedding = nn.Embedding(max_sequence_length, hidden_size)
        self.layer_norm = nn.LayerNorm(hidden_size, eps=1e-5)
        self.dropout = nn.Dropout(embedding_dropout)

    def forward(self, input_ids, start_pos=0):
        seq_length = input_ids.size(1)
        position_ids = torch.arange(start=start_pos, end=start_pos + seq_length, dtype=torch.long,
                                    device=input_ids.device)
        position_ids = position_ids.unsqueeze(0).repeat(input_ids.size(0), 1)
        embeddings = self.token_embedding(input_ids) + self.position_embedding(position_ids)
        embeddings = self.layer_norm(embeddings)
        return self.dropout(embeddings)


class MultiHeadAttention(nn.Module):
    def __init__(self, hidden_size, num_attention_heads):
        super().__init__()
        self.attn_head_size = hidden_size // num_attention_heads
        self.num_attention_heads = num_attention_heads
        self.attn_scale = math.sqrt(math.sqrt(self.attn_head_size))
        self.query_net = nn.Linear(hidden_size, hidden_size)
        self.key_net = nn.Linear(hidden_size, hidden_size)
        self.value_net = nn.Linear(hidden_size, hidden_size)
        self.out_projection = nn.Linear(hidden_size, hidden_size)

    def transpose_for_scores(self, x):
        new_x_shape = x.size()[:-1] + (self.num_attention_heads, self.attn_head_size)
        return x.view(*new_x_shape).permute(0, 2, 1, 3)

    def forward(self, queries, keys, values, attention_mask):
        query = self.transpose_for_scores(self.query_net(queries)) / self.attn_scale
        key = self.transpose_for_scores(self.key_net(keys)) / self.attn_scale
        value = self.transpose_for_scores(self.value_net(values))
        attention_scores = torch.matmul(query, key.transpose(-1, -2))
        if attention_mask is not None:
            attention_scores = attention_scores + attention_mask.to(attention_scores.dtype)
        attention_probs = torch.softmax(attention_scores, dim=-1)
        context = torch.matmul(attention_probs, value)
        context = context.permute(0, 2, 1, 3).contiguous()
        new_context_shape = context.size()[:-2] + (context.size(-1) * context.size(-2),)
        return self.out_projection(context.view(*new_context_shape))


class PositionWiseFF(nn.Module):
    def __init__(self, hidden_size, inner_size):
        super().__init__()
        self.dense_in = nn.Linear(hidden_size, inner_size)
        self.dense_out = nn.Linear(inner_size, hidden_size)

    def forward(self, hidden_states):
        return self.dense_out(F.relu(self.dense_in(hidden_states)))


class TransformerDecoderBlock(nn.Module):
    def __init__(self, hidden_size, inner_size, num_attention_heads, pre_ln=True):
        super().__init__()
        self.pre_ln = pre_ln
        self.layer_norm_1 = nn.LayerNorm(hidden_size, eps=1e-5)
        self.first_sub_layer = MultiHeadAttention(hidden_size, num_attention_heads)
        self.layer_norm_3 = nn.LayerNorm(hidden_size, eps=1e-5)
        self.third_sub_layer = PositionWiseFF(hidden_size, inner_size)

    def forward(self, decoder_query, decoder_mask):
        residual = decoder_query
        decoder_query = self.layer_norm_1(decoder_query)
        self_attn_output = self.first_sub_layer(decoder_query, decoder_query, decoder_query, decoder_mask)
        self_attn_output += residual
        residual = self_attn_output
        self_attn_output = self.layer_norm_3(self_attn_output)
        output_states = self.third_sub_layer(self_attn_output)
        output_states += residual
        return output_states


def form_attention_mask(input_mask, diagonal=None):
    """(B, T) 1/0 -> an additive (B, 1, T, T) mask; with `diagonal` the future is cut off as well."""
    attn_shape = (1, input_mask.shape[1], input_mask.shape[1])
    attn_mask = input_mask.to(dtype=bool).unsqueeze(1)
    if diagonal is not None:
        future_mask = torch.tril(torch.ones(attn_shape, dtype=torch.bool, device=input_mask.device), diagonal)
        attn_mask = attn_mask & future_mask
    attention_mask = (1 - attn_mask.to(torch.float)) * -10000.0
    return attention_mask.unsqueeze(1)


class TransformerDecoder(nn.Module):
    final_norm = True

    def __init__(self, num_layers, hidden_size, inner_size, num_attention_heads, pre_ln=True):
        super().__init__()
        if pre_ln and self.final_norm:
            self.final_layer_norm = nn.LayerNorm(hidden_size, eps=1e-5)
        else:
            self.final_layer_norm = None
        layer = TransformerDecoderBlock(hidden_size, inner_size, num_attention_heads, pre_ln)
        import copy
        self.layers = nn.ModuleList([copy.deepcopy(layer) for _ in range(num_layers)])

    def forward(self, decoder_states, decoder_mask):
        decoder_attn_mask = form_attention_mask(decoder_mask, diagonal=0)
        for layer in self.layers:
            decoder_states = layer(decoder_states, decoder_attn_mask)
        if self.final_layer_norm is not None:
            decoder_states = self.final_layer_norm(decoder_states)
        return decoder_states


class TransformerDecoderNoFinalNorm(TransformerDecoder):
    final_norm = False


class NemoLM(nn.Module):
    decoder_class = TransformerDecoder

    def __init__(self, vocab_size, hidden_size, num_attention_heads, num_layers, max_sequence_length=512):
        super().__init__()
        self.embedding_layer = TransformerEmbedding(vocab_size, hidden_size, max_sequence_length)
        self.encoder = self.decoder_class(num_layers, hidden_size, 4 * hidden_size, num_attention_heads, pre_ln=True)
        self.log_softmax = nn.Linear(hidden_size, vocab_size)

    def forward(self, input_ids, input_mask=None):
        if input_mask is None:
            input_mask = torch.ones_like(input_ids)
        hidden_states = self.embedding_layer(input_ids)
        hidden_states = self.encoder(hidden_states, input_mask)
        return self.log_softmax(hidden_states)


class NemoLMNoFinalNorm(NemoLM):
    decoder_class = TransformerDecoderNoFinalNorm
