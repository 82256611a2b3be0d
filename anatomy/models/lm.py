"""Decoder-only language model (GPT-2, Llama): a causal ``TransformerStack`` of self-attention blocks and a (tied)
output head."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import nn

from anatomy.components.context import check_positions, hf_padding
from anatomy.components.embedding import InputEmbeddings
from anatomy.components.kv_cache import KVCache
from anatomy.models.cache import close_cache, open_cache
from anatomy.models.common import ids_shape, keep_positions
from anatomy.models.hf_api import GenerationMethods
from anatomy.models.outputs import LMOutput, OutputFlags, output_flags
from anatomy.models.stack import TransformerStack

if TYPE_CHECKING:
    from typing_extensions import Unpack


def lm_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Next-token cross-entropy: position ``t`` predicts ``labels[t + 1]``; label -100 is ignored."""
    if labels.shape != logits.shape[:2]:
        raise ValueError(f"labels must have shape (B, T)={tuple(logits.shape[:2])}, got {tuple(labels.shape)}")
    # The labels move, not the logits: the next token of the last position is "ignored" (-100), so the loss reads
    # the logits in place instead of copying all but their last position (B*(T-1)*V floats, and again backward).
    targets = F.pad(labels[:, 1:], (0, 1), value=-100)  # (B, T)
    return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), ignore_index=-100)  # (B*T, V)


class DecoderLM(GenerationMethods, nn.Module):
    """``final_logit_softcap``: ``c`` or ``None``; the logits become ``c * tanh(logits / c)`` (Gemma 2)."""

    def __init__(
        self,
        *,
        embeddings: InputEmbeddings,
        stack: TransformerStack,
        lm_head: nn.Linear,
        final_logit_softcap: float | None = None,
    ) -> None:
        super().__init__()
        self.embeddings, self.stack, self.lm_head = embeddings, stack, lm_head
        self.final_logit_softcap = final_logit_softcap

    def new_caches(self, capacity: int | None = None) -> list[KVCache]:
        """One empty cache per block; ``capacity`` (the final length, when known) sizes their buffers once."""
        return self.stack.new_caches(capacity)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        *,
        labels: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        kv_caches: list[KVCache] | None = None,
        use_cache: bool = False,
        past_key_values: Any = None,
        cache: Any = None,
        logits_to_keep: int | torch.Tensor = 0,
        **flags: Unpack[OutputFlags],
    ) -> LMOutput | tuple[Any, ...]:
        """``input_ids: (B, T)``. With a cache, ``attention_mask`` covers the cached *and* the new tokens
        ``(B, S + T)`` and positions continue from the mask (left-padded batches decode correctly).

        Hugging Face's calls work: ``past_key_values=`` (or transformers 5's ``cache=``) takes a ``ModelCache``,
        legacy ``((k, v), ...)`` tuples or a transformers ``DynamicCache``; ``use_cache=True`` returns the cache as
        ``past_key_values``; ``output_hidden_states=True`` gives the embeddings' output and every block's (the
        last one after the final norm, as HF); ``return_dict=False`` gives ``out.to_tuple()``. ``logits_to_keep``
        (HF's): the head runs on the last N positions only (0: all), or on the positions a tensor names
        (``models.common.keep_positions``); the loss needs them all."""
        output_attentions, output_hidden_states, return_dict = output_flags(self, flags)
        b, t = ids_shape(input_ids)
        if labels is not None and not (isinstance(logits_to_keep, int) and logits_to_keep == 0):
            raise ValueError("labels need the logits of every position: give logits_to_keep=0 (the default)")
        if cache is not None:
            if past_key_values is not None:
                raise ValueError("give past_key_values or cache, not both (transformers 5 renamed one to the other)")
            past_key_values = cache
        kv_caches, foreign = open_cache(self, past_key_values, kv_caches, use_cache, attention_mask)
        past = self.stack.seen(kv_caches, t)
        ctx = self.stack.attention_context(
            b,
            t,
            input_ids.device,
            past=past,
            kv_caches=kv_caches,
            padding=hf_padding("attention_mask", attention_mask, b, past + t),
            hf_mask=True,
            is_causal=True,
            positions=check_positions("position_ids", position_ids, b, t),
        )  # masks, positions, cache: checked once, under the names of this forward's arguments
        x = self.embeddings(input_ids, ctx.positions)  # (B, T, D)
        hidden: list[torch.Tensor] | None = [] if output_hidden_states else None
        x, weights = self.stack(x, ctx=ctx, kv_caches=kv_caches, need_weights=output_attentions, hidden_states=hidden)
        logits = self.lm_head(keep_positions(x, logits_to_keep))  # (B, T, V), or (B, N, V) kept
        if self.final_logit_softcap is not None:
            logits = torch.tanh(logits / self.final_logit_softcap) * self.final_logit_softcap
        loss = None if labels is None else lm_loss(logits, labels)
        out = LMOutput(
            logits=logits,
            loss=loss,
            past_key_values=close_cache(kv_caches, foreign, t),
            attentions=weights,
            last_hidden_state=x,
            hidden_states=None if hidden is None else tuple(hidden),
        )
        return out if return_dict else out.to_tuple()
