"""Sequence classifier: an encoder, a pooled vector (CLS or mean over real tokens), a linear head."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from anatomy.models.common import ids_shape, key_padding
from anatomy.models.encoder import Encoder
from anatomy.models.hf_api import PretrainedMethods
from anatomy.models.outputs import ClassifierOutput


def pool(hidden: torch.Tensor, mask: torch.Tensor | None, how: str) -> torch.Tensor:
    """``(B, T, D)`` → ``(B, D)``. ``"cls"``: the first real token; ``"mean"``: the mean over real tokens only
    (padding never enters the average)."""
    if how == "cls":
        if mask is None:
            return hidden[:, 0]
        first = mask.long().argmax(dim=-1)  # (B,) index of the first real token (left padding safe)
        return hidden[torch.arange(hidden.shape[0], device=hidden.device), first]  # (B, D)
    if mask is None:
        return hidden.mean(dim=1)
    weights = mask.to(hidden.dtype)[..., None]  # (B, T, 1)
    return (hidden * weights).sum(1) / weights.sum(1).clamp_min(1.0)  # (B, D)


class Classifier(PretrainedMethods, nn.Module):
    def __init__(
        self,
        *,
        encoder: Encoder,
        classifier: nn.Linear,
        pooling: str = "cls",
        pooler: nn.Linear | None = None,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        if pooling not in ("cls", "mean"):
            raise ValueError(f"unknown pooling {pooling!r}; valid names: cls, mean")
        self.encoder, self.pooling, self.pooler, self.classifier = encoder, pooling, pooler, classifier
        self.dropout = nn.Dropout(dropout)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        *,
        token_type_ids: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        output_attentions: bool = False,
        output_hidden_states: bool = False,
        return_dict: bool = True,
    ) -> ClassifierOutput | tuple[Any, ...]:
        b, t = ids_shape(input_ids)
        enc = self.encoder(
            input_ids,
            attention_mask,
            token_type_ids=token_type_ids,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
        )
        pooled = pool(enc.last_hidden_state, key_padding(attention_mask, b, t), self.pooling)  # (B, D)
        if self.pooler is not None:
            pooled = torch.tanh(self.pooler(pooled))
        logits = self.classifier(self.dropout(pooled))  # (B, num_labels)
        loss = None
        if labels is not None:
            if labels.shape != (b,):
                raise ValueError(f"labels must have shape (B,)=({b},), got {tuple(labels.shape)}")
            loss = F.cross_entropy(logits.float(), labels)
        out = ClassifierOutput(
            logits=logits, loss=loss, pooled=pooled, attentions=enc.attentions, hidden_states=enc.hidden_states
        )
        return out if return_dict else out.to_tuple()
