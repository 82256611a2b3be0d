"""Decoder of an encoder-decoder model: masked self-attention, cross-attention to the encoder memory, FFN."""

from __future__ import annotations

import torch
from torch import nn

from anatomy.components.embedding import InputEmbeddings
from anatomy.components.hook_point import HookPoint
from anatomy.components.kv_cache import KVCache
from anatomy.components.masks import as_attention_mask, combine, key_padding_to_attention
from anatomy.components.positional.base import PositionalScheme
from anatomy.models.common import ids_shape, key_padding, make_positions
from anatomy.shapes import check_hidden


class DecoderStack(nn.Module):
    def __init__(self, *, blocks: list[nn.Module], final_norm: nn.Module | None = None,
                 position_bias: PositionalScheme | None = None) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(blocks)
        self.final_norm = final_norm
        self.position_bias = position_bias
        self.hook_out = HookPoint()

    def new_caches(self, capacity: int | None = None) -> list[tuple[KVCache, KVCache]]:
        """A (self, cross) pair per block; ``capacity`` sizes the self-attention buffers once."""
        return [(KVCache(capacity, window=block.attn.sliding_window), KVCache()) for block in self.blocks]

    def forward(self, x: torch.Tensor, memory: torch.Tensor, *, key_padding_mask: torch.Tensor | None = None,
                memory_key_padding_mask: torch.Tensor | None = None, attn_mask: torch.Tensor | None = None,
                memory_attn_mask: torch.Tensor | None = None, is_causal: bool = True,
                positions: torch.Tensor | None = None, kv_caches: list | None = None, need_weights: bool = False,
                hidden_states: list | None = None):
        """``x: (B, T, D)`` target states, ``memory: (B, S, D)`` encoder output. Masks are boolean, True = may
        attend. Returns ``(hidden (B, T, D), (self_weights, cross_weights) per layer or None)``. A
        ``hidden_states`` list receives each block's input and then the returned output."""
        d_model = self.blocks[0].attn.d_model
        check_hidden("x", x, d_model)
        check_hidden("memory", memory, d_model)
        b, t, _ = x.shape
        s = memory.shape[1]
        if kv_caches is not None and len(kv_caches) != len(self.blocks):
            raise ValueError(f"kv_caches must hold one (self, cross) pair per block ({len(self.blocks)}), "
                             f"got {len(kv_caches)}")
        past = kv_caches[0][0].seen if kv_caches else 0
        if positions is None:
            positions = torch.arange(past, past + t, device=x.device)[None]  # (1, T)
        h = self.blocks[0].attn.n_heads
        if attn_mask is not None:
            attn_mask = as_attention_mask(attn_mask, b, h, t, past + t, name="attn_mask")
        if memory_attn_mask is not None:
            memory_attn_mask = as_attention_mask(memory_attn_mask, b, h, t, s, name="memory_attn_mask")
        self_mask = combine(None if key_padding_mask is None else key_padding_to_attention(key_padding_mask),
                            attn_mask)
        cross_mask = combine(None if memory_key_padding_mask is None
                             else key_padding_to_attention(memory_key_padding_mask), memory_attn_mask)
        bias = None
        if self.position_bias is not None:
            k_pos = positions if not past else torch.cat(
                [kv_caches[0][0].positions.expand(positions.shape[0], -1), positions], dim=-1)
            bias = self.position_bias.score_bias(None, positions, k_pos, 1.0)  # (B|1, H, T, S)
        weights = []
        for i, block in enumerate(self.blocks):
            if hidden_states is not None:
                hidden_states.append(x)
            x, w = block(x, memory, mask=self_mask, memory_mask=cross_mask, is_causal=is_causal,
                         kv_cache=None if kv_caches is None else kv_caches[i], need_weights=need_weights,
                         positions=positions, attn_bias=bias)
            weights.append(w)
        if self.final_norm is not None:
            x = self.final_norm(x)
        x = self.hook_out(x)
        if hidden_states is not None:
            hidden_states.append(x)
        return x, (tuple(weights) if need_weights else None)


class Decoder(nn.Module):
    """``decoder_input_ids (B, T)`` and encoder ``memory (B, S, D)`` → ``(B, T, D)``."""

    def __init__(self, *, embeddings: InputEmbeddings, stack: DecoderStack) -> None:
        super().__init__()
        self.embeddings, self.stack = embeddings, stack

    def forward(self, input_ids: torch.Tensor, memory: torch.Tensor, *, attention_mask: torch.Tensor | None = None,
                memory_mask: torch.Tensor | None = None, position_ids: torch.Tensor | None = None,
                kv_caches: list | None = None, output_attentions: bool = False, hidden_states: list | None = None):
        b, t = ids_shape(input_ids, "decoder_input_ids")
        past = kv_caches[0][0].seen if kv_caches else 0
        mask = key_padding(attention_mask, b, past + t, "decoder_attention_mask")
        mem_mask = key_padding(memory_mask, b, memory.shape[1], "attention_mask")
        positions = make_positions(mask, t, past, input_ids.device, position_ids)
        x = self.embeddings(input_ids, positions)  # (B, T, D)
        return self.stack(x, memory, key_padding_mask=mask, memory_key_padding_mask=mem_mask, positions=positions,
                          kv_caches=kv_caches, need_weights=output_attentions, hidden_states=hidden_states)
