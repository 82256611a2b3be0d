"""Small helpers shared by the models: HF-style attention masks and position ids."""

from __future__ import annotations

import torch

from anatomy.components.context import hf_padding
from anatomy.shapes import check_rank, check_tensor


def key_padding(
    attention_mask: torch.Tensor | None, b: int, s: int, name: str = "attention_mask"
) -> torch.Tensor | None:
    """HF-style ``(B, S)`` mask (bool, or integers 0/1; 1 = real token) → boolean ``(B, S)`` or ``None``
    (``components.context.hf_padding``: a model's forward checks it there, once, while building its context)."""
    return hf_padding(attention_mask, b, s, name)


def ids_shape(input_ids: torch.Tensor, name: str = "input_ids") -> tuple[int, int]:
    check_tensor(name, input_ids)
    check_rank(name, input_ids, 2, "(B, T)")
    return input_ids.shape[0], input_ids.shape[1]
