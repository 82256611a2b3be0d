"""Choosing the next token from logits: small pure functions over ``logits: (B, V)``.

Each filter returns new logits with the excluded tokens set to ``-inf``, so they compose in the usual order
``repetition penalty → temperature → top-k → top-p → min-p → softmax → sample`` (Hugging Face's order too).
Greedy decoding is the ``argmax``; it ignores temperature and the filters, which never change the arg-max token
(the repetition penalty does change it: ``generate`` applies it before either rule).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from anatomy.shapes import check_rank


def greedy(logits: torch.Tensor) -> torch.Tensor:
    """``(B, V)`` → ``(B,)``: the most likely token (the first one on ties, as ``torch.argmax``)."""
    check_rank("logits", logits, 2, "(B, V)")
    return logits.argmax(dim=-1)  # (B,)


def apply_temperature(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """Divide by ``temperature > 0``: below 1 sharpens the distribution, above 1 flattens it."""
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0 (use do_sample=False for greedy), got {temperature}")
    return logits if temperature == 1.0 else logits / temperature


def top_k_filter(logits: torch.Tensor, k: int) -> torch.Tensor:
    """Keep the ``k`` largest logits of each row (ties at the k-th value are kept too)."""
    if not isinstance(k, int) or isinstance(k, bool) or k <= 0:
        raise ValueError(f"top_k must be a positive integer, got {k!r}")
    if k >= logits.shape[-1]:
        return logits
    kth = logits.topk(k, dim=-1).values[..., -1:]  # (B, 1)
    return logits.masked_fill(logits < kth, float("-inf"))


def top_p_filter(logits: torch.Tensor, p: float) -> torch.Tensor:
    """Nucleus filtering (Holtzman et al. 2020): keep the smallest set of most likely tokens whose probability
    reaches ``p``; the most likely token is always kept."""
    if not 0.0 < p <= 1.0:
        raise ValueError(f"top_p must be in (0, 1], got {p}")
    if p == 1.0:
        return logits
    # HF's arithmetic (TopPLogitsWarper), so that a token at the edge falls the same way: ascending order, drop the
    # tokens whose cumulative probability stays within 1 - p; the most likely token is always kept
    sorted_logits, order = logits.sort(dim=-1, descending=False)  # (B, V)
    cumulative = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
    drop_sorted = cumulative <= (1 - p)
    drop_sorted[..., -1:] = False
    drop = drop_sorted.scatter(-1, order, drop_sorted)  # back to vocabulary order
    return logits.masked_fill(drop, float("-inf"))


def min_p_filter(logits: torch.Tensor, p: float) -> torch.Tensor:
    """Min-p sampling (Nguyen et al. 2024): keep the tokens whose probability is at least ``p`` times the most
    likely token's. Unlike top-p the cut follows the model's confidence: a peaked row keeps few tokens, a flat row
    many. Applied after temperature, as Hugging Face's ``MinPLogitsWarper`` is; the most likely token is kept."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"min_p must be in [0, 1], got {p}")
    probs = logits.float().softmax(dim=-1)  # (B, V)
    return logits.masked_fill(probs < p * probs.amax(dim=-1, keepdim=True), float("-inf"))


def seen_tokens(ids: torch.Tensor, vocab_size: int, mask: torch.Tensor | None = None) -> torch.Tensor:
    """``(B, T)`` ids → ``(B, V)`` bool: which tokens each row holds (positions where ``mask`` is False, the left
    padding, do not count)."""
    if mask is not None:
        ids = ids.masked_fill(~mask, vocab_size)  # pads land in a spare column
    seen = torch.zeros(ids.shape[0], vocab_size + 1, dtype=torch.bool, device=ids.device)  # (B, V + 1)
    return seen.scatter_(1, ids.clamp(0, vocab_size), True)[:, :vocab_size]  # (B, V)


def apply_repetition_penalty(logits: torch.Tensor, seen: torch.Tensor, penalty: float) -> torch.Tensor:
    """CTRL's repetition penalty (Keskar et al. 2019), as Hugging Face applies it: the logit of every token already
    in the sequence (``seen: (B, V)`` bool) is divided by ``penalty`` when positive and multiplied by it when
    negative, so ``penalty > 1`` makes a repeat less likely either way; 1 changes nothing."""
    if not penalty > 0:
        raise ValueError(f"repetition_penalty must be > 0 (1.0 = none), got {penalty}")
    penalised = torch.where(logits < 0, logits * penalty, logits / penalty)
    return torch.where(seen, penalised, logits)


def sample(logits: torch.Tensor, generator: torch.Generator | Sequence[torch.Generator] | None = None) -> torch.Tensor:
    """``(B, V)`` → ``(B,)`` drawn from ``softmax(logits)`` (float32). ``generator`` may be one generator per row:
    each row then draws from its own, so a row's draws do not depend on the rows batched with it."""
    probs = logits.float().softmax(dim=-1)  # (B, V)
    if generator is not None and not isinstance(generator, torch.Generator):
        if len(generator) != probs.shape[0]:
            raise ValueError(f"generator: one per row needs {probs.shape[0]} generators, got {len(generator)}")
        return torch.cat([torch.multinomial(row[None], 1, generator=g) for row, g in zip(probs, generator)]).squeeze(
            -1
        )  # (B,)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)  # (B,)


def next_token(
    logits: torch.Tensor,
    *,
    do_sample: bool = False,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | Sequence[torch.Generator] | None = None,
    min_p: float | None = None,
) -> torch.Tensor:
    """The next token of each row: greedy, or sampled after temperature, top-k, top-p and min-p (HF's order)."""
    if not do_sample:
        return greedy(logits)
    logits = apply_temperature(logits, temperature)
    if top_k is not None:
        logits = top_k_filter(logits, top_k)
    if top_p is not None:
        logits = top_p_filter(logits, top_p)
    if min_p is not None:
        logits = min_p_filter(logits, min_p)
    return sample(logits, generator)
