"""Logits processors with Hugging Face's rules and call convention: ``processor(ids (B, L), scores (B, V)) -> scores``.

``ids`` is every row so far (prompt, left padding included, then the new tokens; an encoder-decoder model's decoder
ids), ``scores`` the step's float32 logits. A banned token gets ``-inf``. ``build_processors`` lists them in HF's
order (``GenerationMixin._get_logits_processor``)::

    repetition penalty → no-repeat n-gram → bad words → min length → min new tokens → suppress tokens
    → the caller's own processors → (sampling only) temperature → top-k → top-p → min-p

so HF's own processor objects can be passed in ``logits_processor=[...]`` and ours run in HF's. Each class here
matches its HF namesake token for token (tests/generation/test_processors.py runs both): ``NoRepeatNGram`` bans a
token that would repeat an n-gram already in the row, ``BadWords`` a token that completes a banned sequence (a
one-token sequence always; eos ids are never banned), ``MinNewTokens`` every eos id before ``min_new_tokens`` new
tokens (``MinLength`` before ``min_length`` tokens in all), ``SuppressTokens`` the listed ids at every step.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from anatomy.generation.sampling import (
    apply_repetition_penalty,
    apply_temperature,
    min_p_filter,
    seen_tokens,
    top_k_filter,
    top_p_filter,
)

Processor = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
NEG_INF = float("-inf")


class RepetitionPenalty:
    """CTRL's penalty on every token the row holds; the left padding of the prompt (``prompt_mask`` False, as HF's
    ``prompt_ignore_length``) does not count."""

    def __init__(self, penalty: float, prompt_mask: torch.Tensor | None) -> None:
        self.penalty, self.prompt_mask = penalty, prompt_mask

    def __call__(self, ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        mask = self.prompt_mask
        if mask is not None:
            mask = torch.cat([mask, mask.new_ones(ids.shape[0], ids.shape[1] - mask.shape[1])], dim=1)  # (B, L)
        return apply_repetition_penalty(scores, seen_tokens(ids, scores.shape[-1], mask), self.penalty)


class NoRepeatNGram:
    """Ban every token that would complete an n-gram of ``size`` tokens already in the row (HF's
    ``no_repeat_ngram_size``; the row's left padding counts, as in HF)."""

    def __init__(self, size: int) -> None:
        self.size = size

    def __call__(self, ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        n, length = self.size, ids.shape[1]
        if length + 1 < n:
            return scores
        out = scores.clone()
        for row, tokens in enumerate(ids.tolist()):
            prefix = tuple(tokens[length - n + 1 :])
            banned = [tokens[i + n - 1] for i in range(length - n + 1) if tuple(tokens[i : i + n - 1]) == prefix]
            if banned:
                out[row, banned] = NEG_INF
        return out


class BadWords:
    """Ban the last token of each banned sequence when the row ends with the rest of it (HF's ``bad_words_ids``);
    a sequence that is one eos id is dropped, as HF drops it."""

    def __init__(self, bad_words_ids: Sequence[Sequence[int]], eos: Sequence[int]) -> None:
        words = [list(w) for w in bad_words_ids]
        self.words = [w for w in words if not (len(w) == 1 and w[0] in eos)]

    def __call__(self, ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        out = scores.clone()
        rows = ids.tolist()
        for word in self.words:
            *head, last = word
            if last >= scores.shape[-1]:
                continue
            for r, tokens in enumerate(rows):
                if not head or (len(tokens) >= len(head) and tokens[len(tokens) - len(head) :] == head):
                    out[r, last] = NEG_INF
        return out


class MinLength:
    """Ban every eos id while the row is shorter than ``min_length`` tokens (prompt included, as HF counts)."""

    def __init__(self, min_length: int, eos: Sequence[int], prompt_length: int = 0) -> None:
        self.min_length, self.eos, self.prompt_length = min_length, list(eos), prompt_length

    def __call__(self, ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if ids.shape[1] - self.prompt_length >= self.min_length:
            return scores
        out = scores.clone()
        out[:, [e for e in self.eos if e < scores.shape[-1]]] = NEG_INF
        return out


def MinNewTokens(min_new_tokens: int, eos: Sequence[int], prompt_length: int) -> MinLength:
    """Ban every eos id before ``min_new_tokens`` new tokens (HF's ``min_new_tokens``)."""
    return MinLength(min_new_tokens, eos, prompt_length)


class SuppressTokens:
    """``-inf`` on the listed ids at every step (HF's ``suppress_tokens``)."""

    def __init__(self, tokens: Sequence[int]) -> None:
        self.tokens = list(tokens)

    def __call__(self, ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        out = scores.clone()
        out[:, [t for t in self.tokens if t < scores.shape[-1]]] = NEG_INF
        return out


def _check_id_lists(name: str, value: Any, nested: bool) -> None:
    rows = value if nested else [value]
    ok = (
        isinstance(value, (list, tuple))
        and len(value) > 0
        and all(
            isinstance(r, (list, tuple))
            and len(r) > 0
            and all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in r)
            for r in rows
        )
    )
    if not ok:
        shape = "a non-empty list of non-empty lists of token ids" if nested else "a non-empty list of token ids"
        raise ValueError(f"{name} must be {shape}, got {value!r}")


def build_processors(
    *,
    penalty: float | None,
    prompt_mask: torch.Tensor | None,
    no_repeat_ngram_size: int | None,
    bad_words_ids: Any,
    min_length: int | None,
    min_new_tokens: int | None,
    suppress_tokens: Any,
    eos: Sequence[int],
    prompt_length: int,
    custom: Sequence[Processor] | None,
) -> list[Processor]:
    """The processors that shape the scores before any sampling rule, in HF's order (custom ones last, unless one
    is of the same class as a built one, which it then replaces in place, as HF merges them)."""
    out: list[Processor] = []
    if penalty is not None:
        out.append(RepetitionPenalty(penalty, prompt_mask))
    if no_repeat_ngram_size:
        if (
            not isinstance(no_repeat_ngram_size, int)
            or isinstance(no_repeat_ngram_size, bool)
            or no_repeat_ngram_size < 0
        ):
            raise ValueError(f"no_repeat_ngram_size must be a non-negative integer, got {no_repeat_ngram_size!r}")
        out.append(NoRepeatNGram(no_repeat_ngram_size))
    if bad_words_ids is not None:
        _check_id_lists("bad_words_ids", bad_words_ids, nested=True)
        out.append(BadWords(bad_words_ids, eos))
    for name, value in (("min_length", min_length), ("min_new_tokens", min_new_tokens)):
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
            raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
    if min_length and eos:
        out.append(MinLength(min_length, eos))
    if min_new_tokens and eos:
        out.append(MinNewTokens(min_new_tokens, eos, prompt_length))
    if suppress_tokens is not None:
        _check_id_lists("suppress_tokens", suppress_tokens, nested=False)
        out.append(SuppressTokens(suppress_tokens))
    for extra in custom or ():
        if not callable(extra):
            raise ValueError(f"logits_processor must hold callables (ids, scores) -> scores, got {extra!r}")
        same = [i for i, p in enumerate(out) if type(p) is type(extra)]
        if same:
            out[same[0]] = extra
        elif extra not in out:
            out.append(extra)
    return out


def sampling_processors(
    *, temperature: float, top_k: int | None, top_p: float | None, min_p: float | None
) -> list[Processor]:
    """HF's warpers (sampling only): temperature → top-k → top-p → min-p."""
    out: list[Processor] = []
    if temperature != 1.0:
        out.append(lambda ids, s: apply_temperature(s, temperature))
    if top_k is not None:
        k = top_k
        out.append(lambda ids, s: top_k_filter(s, k))
    if top_p is not None and top_p < 1.0:
        p = top_p
        out.append(lambda ids, s: top_p_filter(s, p))
    if min_p is not None:
        m = min_p
        out.append(lambda ids, s: min_p_filter(s, m))
    return out
