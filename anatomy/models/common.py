"""Small helpers shared by the models: HF-style attention masks, ``input_ids``, ``logits_to_keep``."""

from __future__ import annotations

import torch

from anatomy.components.context import hf_padding
from anatomy.shapes import check_rank, check_tensor


def key_padding(
    attention_mask: torch.Tensor | None, b: int, s: int, name: str = "attention_mask"
) -> torch.Tensor | None:
    """HF-style ``(B, S)`` mask (bool, or integers 0/1; 1 = real token) → boolean ``(B, S)`` or ``None``
    (``components.context.hf_padding``: a model's forward checks it there, once, while building its context)."""
    return hf_padding(name, attention_mask, b, s)


def ids_shape(input_ids: torch.Tensor, name: str = "input_ids") -> tuple[int, int]:
    check_tensor(name, input_ids)
    check_rank(name, input_ids, 2, "(B, T)")
    return input_ids.shape[0], input_ids.shape[1]


def keep_positions(hidden: torch.Tensor, logits_to_keep: int | torch.Tensor) -> torch.Tensor:
    """The positions of ``hidden (B, T, D)`` the LM head reads, Hugging Face's ``logits_to_keep``: an int ``N`` keeps
    the last ``N`` (``0``: all of them); a 1-D tensor of positions keeps those for every row; a 2-D integer tensor
    ``(B, P)`` keeps each row's own ``P`` positions; a 2-D boolean ``(B, T)`` keeps its True positions, flattened to
    ``(count, D)``. The head then runs on what is kept only (a prefill needs one position of T)."""
    if isinstance(logits_to_keep, bool) or not isinstance(logits_to_keep, (int, torch.Tensor)):
        raise TypeError(f"logits_to_keep must be an int or a tensor of positions, got {type(logits_to_keep).__name__}")
    if isinstance(logits_to_keep, int):
        if logits_to_keep < 0:
            raise ValueError(f"logits_to_keep must be >= 0 (0 keeps every position), got {logits_to_keep}")
        return hidden if logits_to_keep == 0 else hidden[:, -logits_to_keep:]  # (B, N, D)
    if logits_to_keep.is_floating_point() or logits_to_keep.dim() not in (1, 2):
        raise ValueError(
            "logits_to_keep must be a 1-D or 2-D tensor of positions (or a 2-D boolean mask), got "
            f"dtype {logits_to_keep.dtype} and shape {tuple(logits_to_keep.shape)}"
        )
    if logits_to_keep.dim() == 1:
        return hidden[:, logits_to_keep]  # (B, P, D)
    if logits_to_keep.dtype == torch.bool:
        return hidden[logits_to_keep]  # (count, D)
    return torch.take_along_dim(hidden, logits_to_keep[..., None], dim=1)  # (B, P, D)
