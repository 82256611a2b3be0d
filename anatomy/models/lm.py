"""Decoder-only language model (GPT-2, Llama): causal ``EncoderBlock``s and a (tied) output head."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from anatomy.components.embedding import InputEmbeddings
from anatomy.components.kv_cache import KVCache
from anatomy.models.common import ids_shape, key_padding, make_positions
from anatomy.models.encoder import EncoderStack
from anatomy.models.outputs import LMOutput


def lm_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Next-token cross-entropy: position ``t`` predicts ``labels[t + 1]``; label -100 is ignored."""
    if labels.shape != logits.shape[:2]:
        raise ValueError(f"labels must have shape (B, T)={tuple(logits.shape[:2])}, got {tuple(labels.shape)}")
    # The labels move, not the logits: the next token of the last position is "ignored" (-100), so the loss reads
    # the logits in place instead of copying all but their last position (B*(T-1)*V floats, and again backward).
    targets = F.pad(labels[:, 1:], (0, 1), value=-100)  # (B, T)
    return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), ignore_index=-100)  # (B*T, V)


class DecoderLM(nn.Module):
    def __init__(self, *, embeddings: InputEmbeddings, stack: EncoderStack, lm_head: nn.Linear) -> None:
        super().__init__()
        self.embeddings, self.stack, self.lm_head = embeddings, stack, lm_head

    def new_caches(self, capacity: int | None = None) -> list[KVCache]:
        """One empty cache per block; ``capacity`` (the final length, when known) sizes their buffers once."""
        return [KVCache(capacity, window=block.attn.sliding_window) for block in self.stack.blocks]

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, *,
                labels: torch.Tensor | None = None, position_ids: torch.Tensor | None = None,
                kv_caches: list[KVCache] | None = None, use_cache: bool = False,
                output_attentions: bool = False) -> LMOutput:
        """``input_ids: (B, T)``. With a cache, ``attention_mask`` covers the cached *and* the new tokens
        ``(B, S + T)`` and positions continue from the mask (left-padded batches decode correctly)."""
        b, t = ids_shape(input_ids)
        if use_cache and kv_caches is None:
            kv_caches = self.new_caches()
        past = kv_caches[0].seen if kv_caches else 0
        mask = key_padding(attention_mask, b, past + t)
        positions = make_positions(mask, t, past, input_ids.device, position_ids)
        x = self.embeddings(input_ids, positions)  # (B, T, D)
        x, weights = self.stack(x, key_padding_mask=mask, is_causal=True, positions=positions,
                                kv_caches=kv_caches, need_weights=output_attentions)
        logits = self.lm_head(x)  # (B, T, V)
        loss = None if labels is None else lm_loss(logits, labels)
        return LMOutput(logits=logits, loss=loss, kv_caches=kv_caches, attentions=weights, last_hidden_state=x)
