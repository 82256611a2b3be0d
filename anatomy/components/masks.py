"""Attention masks: boolean, and **True means "may attend"**.

This is the sense of ``torch.nn.functional.scaled_dot_product_attention``. Two kinds exist in the post (§2.4):

* a *padding* mask hides keys that are padding: ``(B, S)``, True on real tokens; attention sees it as
  ``(B, 1, 1, S)``;
* a *causal* mask lets query ``i`` see keys ``j <= i``: ``(T, S)``.

Both are applied to the scores **before** softmax. Zeroing weights after softmax (a pitfall in the post) leaves
rows that no longer sum to one and lets gradients flow through the hidden positions.

``causal_mask(t, s)`` with ``s > t`` is aligned to the bottom right: the ``t`` queries are the *last* ``t``
positions of the ``s`` keys. That is what incremental decoding with a KV cache needs (one new query sees every
cached key). Note that ``scaled_dot_product_attention(is_causal=True)`` aligns to the top left instead; the
attention module only hands ``is_causal`` to SDPA when ``T == S``, where both agree.

``torch.nn.MultiheadAttention`` uses the opposite sense (True = ignore). :func:`to_torch_nn` and
:func:`from_torch_nn` are the one place where the sense is flipped.
"""

from __future__ import annotations

import torch

from anatomy.shapes import check_rank, check_tensor


def causal_mask(t: int, s: int | None = None, *, device: torch.device | str | None = None) -> torch.Tensor:
    """``(T, S)`` boolean mask; query ``i`` may attend to key ``j`` when ``j <= i + (S - T)``."""
    s = t if s is None else s
    for name, value in (("t", t), ("s", s)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
    if s < t:
        raise ValueError(f"s must be >= t for a causal mask (queries are the last t of s keys), got t={t}, s={s}")
    return torch.ones(t, s, dtype=torch.bool, device=device).tril(diagonal=s - t)  # (T, S)


def sliding_window_mask(
    t: int, s: int | None = None, window: int = 1, *, causal: bool = True, device: torch.device | str | None = None
) -> torch.Tensor:
    """``(T, S)`` local-attention band: query ``i`` (the key slot ``i + S - T``, bottom-right aligned like
    ``causal_mask``) sees the ``window`` slots ending at its own, ``i + S - T - window < j <= i + S - T`` (Mistral;
    Hugging Face's ``kv_idx > q_idx - sliding_window``); with ``causal=False`` also the ``window - 1`` after it."""
    s = t if s is None else s
    if not isinstance(window, int) or isinstance(window, bool) or window < 1:
        raise ValueError(f"window must be a positive integer, got {window!r}")
    ones = (
        causal_mask(t, s, device=device)
        if causal
        else torch.ones(t, s, dtype=torch.bool, device=device).tril(diagonal=s - t + window - 1)
    )
    return ones & ~torch.ones(t, s, dtype=torch.bool, device=device).tril(diagonal=s - t - window)  # (T, S)


def padding_mask(lengths: torch.Tensor | list[int], max_len: int) -> torch.Tensor:
    """``(B, S)`` key-padding mask from sequence lengths (right padding): True on the first ``length`` tokens."""
    lengths = torch.as_tensor(lengths)
    check_rank("lengths", lengths, 1, "(B,)")
    if lengths.dtype.is_floating_point or lengths.dtype == torch.bool:
        raise TypeError(f"lengths must hold integers, got dtype {lengths.dtype}")
    if not isinstance(max_len, int) or max_len < 0:
        raise ValueError(f"max_len must be a non-negative integer, got {max_len!r}")
    if lengths.numel() and (int(lengths.min()) < 0 or int(lengths.max()) > max_len):
        raise ValueError(
            f"lengths must lie in [0, max_len={max_len}], got min {int(lengths.min())}, max {int(lengths.max())}"
        )
    return torch.arange(max_len, device=lengths.device) < lengths[:, None]  # (B, S)


def padding_mask_from_ids(ids: torch.Tensor, pad_id: int) -> torch.Tensor:
    """``(B, S)`` key-padding mask: True wherever ``ids != pad_id`` (works for left and right padding)."""
    check_rank("ids", ids, 2, "(B, S)")
    return ids != pad_id  # (B, S)


def key_padding_to_attention(mask: torch.Tensor, name: str = "mask") -> torch.Tensor:
    """``(B, S)`` key-padding mask → ``(B, 1, 1, S)`` so it broadcasts over heads and queries."""
    check_mask_dtype(name, mask)
    check_rank(name, mask, 2, "(B, S)")
    return mask[:, None, None, :]  # (B, 1, 1, S)


def combine(*masks: torch.Tensor | None) -> torch.Tensor | None:
    """Logical AND of boolean masks with broadcasting; ``None`` entries are skipped (``None`` if all are)."""
    out = None
    for i, m in enumerate(masks):
        if m is None:
            continue
        check_mask_dtype(f"masks[{i}]", m)
        out = m if out is None else out & m
    return out


def to_additive(mask: torch.Tensor, dtype: torch.dtype = torch.float32, fill: float = float("-inf")) -> torch.Tensor:
    """Boolean mask → additive float mask: 0 where allowed, ``fill`` (default ``-inf``) where not."""
    check_mask_dtype("mask", mask)
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(~mask, fill)


def from_additive(mask: torch.Tensor, threshold: float = -1e4) -> torch.Tensor:
    """Additive float mask (0 / large negative) → boolean keep-mask. Values ``<= threshold`` are hidden.

    The default threshold catches the fills seen in the wild: ``-inf``, ``finfo.min``, ``-1e9`` and BERT's
    ``-10000``.
    """
    check_tensor("mask", mask)
    if not mask.is_floating_point():
        raise TypeError(f"mask must be a floating-point additive mask, got dtype {mask.dtype}")
    return mask > threshold


def to_torch_nn(mask: torch.Tensor) -> torch.Tensor:
    """Our sense (True = may attend) → ``nn.MultiheadAttention``'s sense (True = ignore)."""
    check_mask_dtype("mask", mask)
    return ~mask


def from_torch_nn(mask: torch.Tensor) -> torch.Tensor:
    """``nn.MultiheadAttention`` mask (bool True = ignore, or additive float) → our sense (True = may attend)."""
    check_tensor("mask", mask)
    if mask.dtype == torch.bool:
        return ~mask
    return from_additive(mask)


def positions_from_mask(mask: torch.Tensor) -> torch.Tensor:
    """``(B, S)`` key-padding mask → ``(B, S)`` position ids counting real tokens only (0 on leading pads).

    With left padding ``[pad, pad, a, b]`` the positions are ``[0, 0, 0, 1]``, so a padded prompt sees the same
    positions as the prompt alone.
    """
    check_mask_dtype("mask", mask)
    check_rank("mask", mask, 2, "(B, S)")
    return (mask.long().cumsum(-1) - 1).clamp_min(0)  # (B, S)


def check_mask_dtype(name: str, mask: object) -> None:
    check_tensor(name, mask)
    assert isinstance(mask, torch.Tensor)  # check_tensor raised otherwise
    if mask.dtype != torch.bool:
        hint = (
            " (an additive float mask can be converted with anatomy.components.masks.from_additive)"
            if mask.is_floating_point()
            else ""
        )
        raise TypeError(f"{name} must be a boolean mask with True = may attend, got dtype {mask.dtype}{hint}")


def as_attention_mask(mask: torch.Tensor, b: int, h: int, t: int, s: int, name: str = "mask") -> torch.Tensor:
    """Validate an attention mask and return it as a 4-D view broadcastable to ``(B, H, T, S)``.

    Accepted: ``(T, S)``, ``(B, T, S)``, ``(B, 1|H, T|1, S)`` (ordinary broadcasting rules, bool dtype).
    """
    check_mask_dtype(name, mask)
    given = tuple(mask.shape)
    if mask.dim() == 2:
        mask = mask[None, None]  # (1, 1, T, S)
    elif mask.dim() == 3:
        mask = mask[:, None]  # (B, 1, T, S)
    elif mask.dim() != 4:
        raise ValueError(
            f"{name} must have 2, 3 or 4 dimensions broadcastable to (B, H, T, S), got {tuple(mask.shape)}"
        )
    want = (b, h, t, s)
    if any(m not in (1, w) for m, w in zip(mask.shape, want)):
        raise ValueError(
            f"{name} of shape {given} does not broadcast to (B={b}, H={h}, T={t}, S={s}); "
            "a (B, S) key-padding mask goes to key_padding_mask= (or expand it with masks.key_padding_to_attention)"
        )
    return mask
