"""The shape legend and the input checks that name the argument.

Every tensor in this package is described with one vocabulary of letters:

====  =====================================================
B     batch size
T     query (target) length
S     key/value (source) length; S == T for self-attention
D     model width, ``d_model``
H     number of query heads
Hkv   number of key/value heads (GQA/MQA); H % Hkv == 0
Dh    width of one head, ``D // H``
F     hidden width of the feed-forward network, ``d_ff``
V     vocabulary size
====  =====================================================

The checks below run *before* any tensor math so that a learner sees
``ValueError: x must have last dimension d_model=16, got (2, 10, 12)``
instead of a matmul traceback from deep inside torch.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

LEGEND = {
    "B": "batch size",
    "T": "query (target) length",
    "S": "key/value (source) length",
    "D": "model width d_model",
    "H": "query heads",
    "Hkv": "key/value heads",
    "Dh": "head width (d_model // n_heads unless head_dim is set)",
    "F": "feed-forward hidden width d_ff",
    "V": "vocabulary size",
}


def check_tensor(name: str, value: object) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(value).__name__}")
    return value


def check_rank(name: str, x: torch.Tensor, rank: int, legend: str) -> None:
    check_tensor(name, x)
    if x.dim() != rank:
        raise ValueError(f"{name} must have {rank} dimensions {legend}, got shape {tuple(x.shape)}")


def check_last_dim(name: str, x: torch.Tensor, size: int, what: str) -> None:
    if x.shape[-1] != size:
        raise ValueError(f"{name} must have last dimension {what}={size}, got shape {tuple(x.shape)}")


def check_hidden(name: str, x: torch.Tensor, d_model: int) -> None:
    """``x`` must be ``(B, T, D)`` with ``D == d_model`` and a floating dtype."""
    check_rank(name, x, 3, "(B, T, D)")
    check_last_dim(name, x, d_model, "d_model")
    if not x.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got dtype {x.dtype}")


def check_token_ids(name: str, ids: torch.Tensor, vocab_size: int) -> None:
    """``ids`` must be an integer ``(B, T)`` tensor with every id in ``[0, vocab_size)``."""
    check_rank(name, ids, 2, "(B, T)")
    if ids.dtype not in (torch.int64, torch.int32, torch.int16, torch.uint8, torch.int8):
        raise TypeError(f"{name} must hold integer token ids, got dtype {ids.dtype}")
    if ids.numel() and not torch.compiler.is_compiling():  # the range check reads values: eager only
        lo, hi = int(ids.min()), int(ids.max())
        if lo < 0 or hi >= vocab_size:
            bad = lo if lo < 0 else hi
            raise ValueError(f"{name} holds token id {bad}, outside [0, vocab_size={vocab_size})")


def check_divisible(name: str, value: int, by_name: str, by: int) -> None:
    if by <= 0:
        raise ValueError(f"{by_name} must be a positive integer, got {by}")
    if value % by:
        raise ValueError(f"{name}={value} must be divisible by {by_name}={by}")


def check_positive(name: str, value: object) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")


def check_choice(name: str, value: object, choices: Iterable[str]) -> None:
    choices = sorted(choices)
    if value not in choices:
        raise ValueError(f"unknown {name} {value!r}; valid names: {', '.join(choices)}")


def fmt(shape: Iterable[int], letters: str) -> str:
    """``fmt((2, 4, 10, 10), "B H T S")`` → ``"(B=2, H=4, T=10, S=10)"``."""
    names = letters.split()
    dims = list(shape)
    if len(names) != len(dims):
        return str(tuple(dims))
    return "(" + ", ".join(f"{n}={d}" for n, d in zip(names, dims)) + ")"


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype for sensitive math (softmax, norm statistics, RoPE angles): at least float32, float64 stays."""
    return torch.promote_types(dtype, torch.float32)
