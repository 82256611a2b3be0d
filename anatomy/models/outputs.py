"""What models return: dataclasses with Hugging Face's field names."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class EncoderOutput:
    last_hidden_state: torch.Tensor  # (B, T, D)
    attentions: tuple[torch.Tensor, ...] | None = None  # per layer (B, H, T, T)


@dataclass
class LMOutput:
    logits: torch.Tensor  # (B, T, V)
    loss: torch.Tensor | None = None
    kv_caches: list | None = None
    attentions: tuple[torch.Tensor, ...] | None = None
    last_hidden_state: torch.Tensor | None = None


@dataclass
class Seq2SeqOutput:
    logits: torch.Tensor  # (B, T, V)
    loss: torch.Tensor | None = None
    encoder_last_hidden_state: torch.Tensor | None = None  # (B, S, D)
    kv_caches: list | None = None
    encoder_attentions: tuple[torch.Tensor, ...] | None = None
    decoder_attentions: tuple[torch.Tensor, ...] | None = None
    cross_attentions: tuple[torch.Tensor, ...] | None = None


@dataclass
class ClassifierOutput:
    logits: torch.Tensor  # (B, num_labels)
    loss: torch.Tensor | None = None
    pooled: torch.Tensor | None = None  # (B, D)
    attentions: tuple[torch.Tensor, ...] | None = None
