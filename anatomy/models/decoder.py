"""Decoder of an encoder-decoder model: masked self-attention, cross-attention to the encoder memory, FFN."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from anatomy.components.context import check_positions
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
        """``attention_mask (B, S + T)`` over the cached and new tokens and ``memory_mask (B, M)`` over the memory:
        boolean, True on real tokens, with Hugging Face's meaning, checked by the caller under its own argument
        names (``Seq2Seq``: ``decoder_attention_mask``, ``attention_mask``, by ``context.hf_padding``)."""
        b, t = ids_shape(input_ids, "decoder_input_ids")
        past = self.stack.seen(kv_caches, t)
        ctx = self.stack.attention_context(
            b,
            t,
            input_ids.device,
            past=past,
            kv_caches=kv_caches,
            padding=attention_mask,
            hf_mask=True,
            memory_len=memory.shape[1],
            memory_padding=memory_mask,
            is_causal=True,
            positions=check_positions("position_ids", position_ids, b, t),
        )
        x = self.embeddings(input_ids, ctx.positions)  # (B, T, D)
        out: tuple[torch.Tensor, tuple[Any, ...] | None] = self.stack(
            x, memory, ctx=ctx, kv_caches=kv_caches, need_weights=output_attentions, hidden_states=hidden_states
        )
        return out
