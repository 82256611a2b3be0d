"""Small helpers shared by the models: HF-style attention masks and position ids."""

from __future__ import annotations

import torch

from anatomy.components.context import query_positions
from anatomy.shapes import check_rank, check_tensor


def key_padding(attention_mask: torch.Tensor | None, b: int, s: int, name: str = "attention_mask"):
    """HF-style ``(B, S)`` mask (bool, or integers 0/1; 1 = real token) → boolean ``(B, S)`` or ``None``."""
    if attention_mask is None:
        return None
    check_rank(name, attention_mask, 2, "(B, S) with 1/True on real tokens")
    if attention_mask.shape != (b, s):
        raise ValueError(f"{name} must have shape (B={b}, S={s}), got {tuple(attention_mask.shape)}")
    if attention_mask.dtype == torch.bool:
        return attention_mask
    if attention_mask.is_floating_point():
        raise TypeError(f"{name} must be bool or integer 0/1 (1 = real token), got dtype {attention_mask.dtype}")
    if (attention_mask.numel() and not torch.compiler.is_compiling()  # a value check: eager only, no graph break
            and not bool(((attention_mask == 0) | (attention_mask == 1)).all())):
        raise ValueError(f"{name} must hold only 0 and 1 (1 = real token)")
    return attention_mask.bool()


def make_positions(mask: torch.Tensor | None, t: int, past: int, device, given: torch.Tensor | None = None):
    """Query positions ``(B|1, T)`` of a model's forward: given ids, else counted from the mask (left padding),
    else ``past + arange`` (``components.context.query_positions``, the one place positions are defaulted)."""
    return query_positions(t, past, device, given=given, mask=mask)


def ids_shape(input_ids: torch.Tensor, name: str = "input_ids") -> tuple[int, int]:
    check_tensor(name, input_ids)
    check_rank(name, input_ids, 2, "(B, T)")
    return input_ids.shape[0], input_ids.shape[1]
