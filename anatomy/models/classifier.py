"""Sequence classifier: an encoder, a pooled vector (CLS or mean over real tokens), a linear head."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import nn

from anatomy.models.common import ids_shape, key_padding
from anatomy.models.encoder import Encoder
from anatomy.models.hf_api import PretrainedMethods
from anatomy.models.outputs import ClassifierOutput, OutputFlags, output_flags

if TYPE_CHECKING:
    from typing_extensions import Unpack


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


def classifier_loss(logits: torch.Tensor, labels: torch.Tensor, problem_type: str | None) -> torch.Tensor:
    """The loss of ``labels`` as HF's ``*ForSequenceClassification`` computes it (in float32). ``problem_type``
    (``ModelConfig.problem_type``): ``"regression"``: MSE against float labels ``(B,)`` for one output, else
    ``(B, num_labels)``; ``"single_label_classification"``: cross entropy against class ids ``(B,)``;
    ``"multi_label_classification"``: BCE with logits against float targets ``(B, num_labels)``. ``None``: HF's
    guess on each call (one output: regression; integer labels: single-label; else multi-label)."""
    b, n = logits.shape
    kind = problem_type or (
        "regression"
        if n == 1
        else "single_label_classification"
        if labels.dtype in (torch.long, torch.int)
        else "multi_label_classification"
    )
    if kind == "single_label_classification":
        if labels.is_floating_point() or labels.numel() != b:
            raise ValueError(
                f"labels for single_label_classification are class ids of shape (B,)=({b},), got "
                f"{str(labels.dtype).removeprefix('torch.')} {tuple(labels.shape)}"
            )
        return F.cross_entropy(logits.float(), labels.reshape(-1))
    want = (b,) if kind == "regression" and n == 1 else (b, n)
    if not labels.is_floating_point() or labels.numel() != b * n or (n > 1 and labels.shape != logits.shape):
        raise ValueError(
            f"labels for {kind} are floats of shape {want} (num_labels={n}), got "
            f"{str(labels.dtype).removeprefix('torch.')} {tuple(labels.shape)}"
        )
    if kind == "regression":
        pair = (logits.squeeze(), labels.squeeze()) if n == 1 else (logits, labels)  # HF squeezes one output
        return F.mse_loss(pair[0].float(), pair[1].float())
    return F.binary_cross_entropy_with_logits(logits.float(), labels.float())


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
        **flags: Unpack[OutputFlags],
    ) -> ClassifierOutput | tuple[Any, ...]:
        output_attentions, output_hidden_states, return_dict = output_flags(self, flags)
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
        config = getattr(self, "config", None)  # set by build_model
        loss = None if labels is None else classifier_loss(logits, labels, getattr(config, "problem_type", None))
        out = ClassifierOutput(
            logits=logits, loss=loss, pooled=pooled, attentions=enc.attentions, hidden_states=enc.hidden_states
        )
        return out if return_dict else out.to_tuple()
