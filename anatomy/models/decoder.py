"""Decoder of an encoder-decoder model: masked self-attention, cross-attention to the encoder memory, FFN."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from anatomy.components.embedding import InputEmbeddings
from anatomy.models.common import ids_shape
from anatomy.models.stack import TransformerStack


class DecoderStack(TransformerStack):
    """A ``TransformerStack`` of ``DecoderBlock``s (cross-attention to a memory), causal unless a call says
    otherwise (``nn.TransformerDecoder``'s counterpart)."""

    default_causal = True


class Decoder(nn.Module):
    """``decoder_input_ids (B, T)`` and encoder ``memory (B, S, D)`` → ``(B, T, D)``."""

    def __init__(self, *, embeddings: InputEmbeddings, stack: TransformerStack) -> None:
        super().__init__()
        self.embeddings, self.stack = embeddings, stack

    def forward(
        self,
        input_ids: torch.Tensor,
        memory: torch.Tensor,
        *,
        attention_mask: torch.Tensor | None = None,
        memory_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        kv_caches: list[Any] | None = None,
        output_attentions: bool = False,
        hidden_states: list[torch.Tensor] | None = None,
    ) -> tuple[torch.Tensor, tuple[Any, ...] | None]:
        b, t = ids_shape(input_ids, "decoder_input_ids")
        ctx = self.stack.attention_context(
            b,
            t,
            input_ids.device,
            memory_len=memory.shape[1],
            attention_mask=attention_mask,
            memory_attention_mask=memory_mask,
            is_causal=True,
            kv_caches=kv_caches,
            positions=position_ids,
            padding_name="decoder_attention_mask",
            memory_padding_name="attention_mask",
            positions_name="position_ids",
        )
        x = self.embeddings(input_ids, ctx.positions)  # (B, T, D)
        out: tuple[torch.Tensor, tuple[Any, ...] | None] = self.stack(
            x, memory, ctx=ctx, kv_caches=kv_caches, need_weights=output_attentions, hidden_states=hidden_states
        )
        return out
