"""Encoder: embeddings, then a stack of ``EncoderBlock``s (the post's whole §5 repeated N times)."""

from __future__ import annotations

import torch
from torch import nn

from anatomy.components.embedding import InputEmbeddings
from anatomy.components.hook_point import HookPoint
from anatomy.components.masks import as_attention_mask, combine, key_padding_to_attention
from anatomy.components.positional.base import PositionalScheme
from anatomy.models.common import ids_shape, key_padding, make_positions
from anatomy.models.hf_api import PretrainedMethods
from anatomy.models.outputs import EncoderOutput
from anatomy.shapes import check_hidden


class EncoderStack(nn.Module):
    """Blocks over hidden states ``(B, T, D)``; the final norm (Pre-Norm models) and a shared score bias (T5)
    live here. Also the body of decoder-only LMs (``is_causal=True``, one KV cache per block)."""

    def __init__(self, *, blocks: list[nn.Module], final_norm: nn.Module | None = None,
                 position_bias: PositionalScheme | None = None) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(blocks)
        self.final_norm = final_norm
        self.position_bias = position_bias
        self.hook_out = HookPoint()

    def forward(self, x: torch.Tensor, *, key_padding_mask: torch.Tensor | None = None,
                attn_mask: torch.Tensor | None = None, is_causal: bool = False, positions: torch.Tensor | None = None,
                kv_caches: list | None = None, need_weights: bool = False, hidden_states: list | None = None):
        """``key_padding_mask: (B, S)`` and ``attn_mask`` (broadcastable to ``(B, H, T, S)``) are boolean,
        True = may attend. Returns ``(hidden (B, T, D), weights per layer or None)``. A ``hidden_states`` list
        receives each block's input and then the returned output (HF's ``output_hidden_states`` tuple)."""
        d_model = self.blocks[0].attn.d_model if len(self.blocks) else x.shape[-1]
        check_hidden("x", x, d_model)
        b, t, _ = x.shape
        past = kv_caches[0].seen if kv_caches else 0
        if positions is None:
            positions = torch.arange(past, past + t, device=x.device)[None]  # (1, T)
        if kv_caches is not None and len(kv_caches) != len(self.blocks):
            raise ValueError(f"kv_caches must hold one cache per block ({len(self.blocks)}), got {len(kv_caches)}")
        n_heads = self.blocks[0].attn.n_heads if len(self.blocks) else 1
        if attn_mask is not None:
            attn_mask = as_attention_mask(attn_mask, b, n_heads, t, past + t, name="attn_mask")
        mask = combine(None if key_padding_mask is None else key_padding_to_attention(key_padding_mask), attn_mask)
        bias = None
        if self.position_bias is not None:
            k_pos = positions if not past else torch.cat(
                [kv_caches[0].positions.expand(positions.shape[0], -1), positions], dim=-1)
            bias = self.position_bias.score_bias(None, positions, k_pos, 1.0)  # (B|1, H, T, S)
        weights = []
        for i, block in enumerate(self.blocks):
            if hidden_states is not None:
                hidden_states.append(x)
            x, w = block(x, mask=mask, is_causal=is_causal, kv_cache=None if kv_caches is None else kv_caches[i],
                         need_weights=need_weights, positions=positions, attn_bias=bias)
            weights.append(w)
        if self.final_norm is not None:
            x = self.final_norm(x)
        x = self.hook_out(x)
        if hidden_states is not None:
            hidden_states.append(x)
        return x, (tuple(weights) if need_weights else None)


class Encoder(PretrainedMethods, nn.Module):
    """``input_ids (B, T)`` → ``last_hidden_state (B, T, D)``; called like a Hugging Face encoder."""

    def __init__(self, *, embeddings: InputEmbeddings, stack: EncoderStack) -> None:
        super().__init__()
        self.embeddings, self.stack = embeddings, stack

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, *,
                token_type_ids: torch.Tensor | None = None, position_ids: torch.Tensor | None = None,
                output_attentions: bool = False, output_hidden_states: bool = False,
                return_dict: bool = True) -> EncoderOutput:
        b, t = ids_shape(input_ids)
        mask = key_padding(attention_mask, b, t)
        positions = make_positions(mask, t, 0, input_ids.device, position_ids)
        x = self.embeddings(input_ids, positions, token_type_ids)  # (B, T, D)
        hidden = [] if output_hidden_states else None
        x, weights = self.stack(x, key_padding_mask=mask, positions=positions, need_weights=output_attentions,
                                hidden_states=hidden)
        out = EncoderOutput(last_hidden_state=x, attentions=weights,
                            hidden_states=None if hidden is None else tuple(hidden))
        return out if return_dict else out.to_tuple()

