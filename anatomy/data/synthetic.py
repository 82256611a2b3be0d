"""Synthetic sequence-to-sequence tasks for the encoder-decoder: copy, reverse, sort.

Each example is a random string over a small alphabet (lower-case letters by default) and its answer: the same
string, reversed, or sorted. Strings are drawn from a ``torch.Generator`` so that a batch is a pure function of the
generator's state (a resumed run draws the same batches).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

ALPHABET = "abcdefghijklmnopqrstuvwxyz"
TASKS: dict[str, Callable[[str], str]] = {
    "copy": lambda s: s,
    "reverse": lambda s: s[::-1],
    "sort": lambda s: "".join(sorted(s)),
}


def solve(task: str, text: str) -> str:
    if task not in TASKS:
        raise ValueError(f"unknown seq2seq task {task!r}; valid names: {', '.join(TASKS)}")
    return TASKS[task](text)


def sample_strings(
    generator: torch.Generator, n: int, *, min_len: int, max_len: int, alphabet: str = ALPHABET
) -> list[str]:
    """``n`` random strings with lengths uniform in ``[min_len, max_len]``."""
    if not 1 <= min_len <= max_len:
        raise ValueError(f"need 1 <= min_len <= max_len, got min_len={min_len}, max_len={max_len}")
    lengths = torch.randint(min_len, max_len + 1, (n,), generator=generator)
    letters = torch.randint(0, len(alphabet), (n, max_len), generator=generator)
    return ["".join(alphabet[i] for i in row[:k].tolist()) for row, k in zip(letters, lengths.tolist())]


def sample_pairs(
    task: str, generator: torch.Generator, n: int, *, min_len: int, max_len: int, alphabet: str = ALPHABET
) -> list[tuple[str, str]]:
    """``n`` (source, target) pairs of ``task``."""
    return [
        (s, solve(task, s)) for s in sample_strings(generator, n, min_len=min_len, max_len=max_len, alphabet=alphabet)
    ]
