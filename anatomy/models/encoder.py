"""Encoder: embeddings, then a stack of ``EncoderBlock``s (the post's whole §5 repeated N times)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from anatomy.components.context import check_positions, hf_padding
from anatomy.components.embedding import InputEmbeddings
from anatomy.models.common import ids_shape
from anatomy.models.hf_api import PretrainedMethods
from anatomy.models.outputs import EncoderOutput, OutputFlags, output_flags
from anatomy.models.stack import TransformerStack

if TYPE_CHECKING:
    from typing_extensions import Unpack


class EncoderStack(TransformerStack):
    """A ``TransformerStack`` of blocks without cross-attention, bidirectional unless a call says
    ``is_causal=True`` (``nn.TransformerEncoder``'s counterpart)."""


class Encoder(PretrainedMethods, nn.Module):
    """``input_ids (B, T)`` → ``last_hidden_state (B, T, D)``; called like a Hugging Face encoder."""

    def __init__(
        self, *, embeddings: InputEmbeddings, stack: TransformerStack, pooler: nn.Linear | None = None
    ) -> None:
        super().__init__()
        self.embeddings, self.stack = embeddings, stack
        self.pooler = pooler  # BertModel's pooler: pooler_output = tanh(pooler(last_hidden_state[:, 0]))

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        *,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        **flags: Unpack[OutputFlags],
    ) -> EncoderOutput | tuple[Any, ...]:
        output_attentions, output_hidden_states, return_dict = output_flags(self, flags)
        b, t = ids_shape(input_ids)
        ctx = self.stack.attention_context(
            b,
            t,
            input_ids.device,
            padding=hf_padding("attention_mask", attention_mask, b, t),
            hf_mask=True,
            is_causal=False,
            positions=check_positions("position_ids", position_ids, b, t),
        )
        x = self.embeddings(input_ids, ctx.positions, token_type_ids)  # (B, T, D)
        hidden: list[torch.Tensor] | None = [] if output_hidden_states else None
        x, weights = self.stack(x, ctx=ctx, need_weights=output_attentions, hidden_states=hidden)
        pooled = None if self.pooler is None else torch.tanh(self.pooler(x[:, 0]))  # (B, D)
        out = EncoderOutput(
            last_hidden_state=x,
            pooler_output=pooled,
            attentions=weights,
            hidden_states=None if hidden is None else tuple(hidden),
        )
        return out if return_dict else out.to_tuple()
