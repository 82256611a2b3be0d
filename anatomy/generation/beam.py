"""Beam search with Hugging Face's rules, so ``num_beams=K`` gives HF ``generate``'s tokens for the same weights.

Each prompt keeps K running beams ``(B, K)`` with their summed log-probabilities. A step scores every
continuation of every beam, ``running + log_softmax(logits)`` over ``(B, K·V)``, and keeps the best
``C = max(2, 1 + n_eos) · K`` (more than K, so that K beams can go on when some of the best end now). A candidate
that ends (an eos token, a stop string, or the last allowed step) leaves the running set; if it is among the top K
of the step it becomes a *finished hypothesis* scored ``sum_logprobs / generated_length ** length_penalty``, and
the K best hypotheses are kept. The K best candidates that did not end are the next running beams; every layer's
KV cache follows them (``reorder``).

When to stop (``early_stopping``): ``True``: as soon as every prompt has K hypotheses; ``False`` (HF's default):
when the best running beam, scored at the current length, cannot beat the worst kept hypothesis; ``"never"``: the
same test at the best length it could still reach (the longest, when ``length_penalty > 0``). Length penalty > 0
favours longer hypotheses, < 0 shorter ones. Masked choices use the additive ``-1e9`` that HF uses, so even
ties fall the same way. The logits processors (the repetition penalty, no-repeat n-grams, bad words...: processors.py)
act on each beam's log-probabilities, as HF's do.
"""

from __future__ import annotations

from typing import Any

import torch

from anatomy.generation.decoding import CachedDecoding
from anatomy.generation.processors import Processor

NEG = -1.0e9  # HF's "impossible" score, added rather than set
# Shapes: the legend's B (prompts) and V, with K = num_beams, C = candidates kept per step, L = T + max_new_tokens.


def _gather(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``x: (B, N, ...)``, ``index: (B, M)`` → ``(B, M, ...)``: the listed beams of each prompt."""
    while index.dim() < x.dim():
        index = index.unsqueeze(-1)
    return torch.take_along_dim(x, index, dim=1)


def beam_search(
    run: CachedDecoding,
    *,
    batch: int,
    num_beams: int,
    max_new_tokens: int,
    eos: torch.Tensor | None,
    pad: int | None,
    length_penalty: float,
    early_stopping: bool | str,
    num_return_sequences: int,
    processors: list[Processor],
    stop: Any,
) -> torch.Tensor:
    """``run`` holds ``batch * num_beams`` rows (each prompt repeated). Returns the best ``num_return_sequences``
    hypotheses per prompt ``(batch * N, T + n)``, best first, shorter ones filled with ``pad``."""
    prefix = run.prefix  # (B*K, T)
    b, k = batch, num_beams
    t = prefix.shape[1]
    device = prefix.device
    total = t + max_new_tokens
    n_eos = 0 if eos is None else eos.numel()
    c = max(2, 1 + n_eos) * k  # candidates kept per step
    fill = pad if pad is not None else (int(eos[0]) if eos is not None else -1)
    running = prefix.new_full((b, k, total), fill)  # (B, K, L)
    running[:, :, :t] = prefix.view(b, k, t)  # (B, K, T)
    running_scores = torch.zeros(b, k, device=device)
    running_scores[:, 1:] = NEG  # only beam 0 expands at the first step: the K copies are one prompt
    finished = running.clone()
    finished_scores = torch.full((b, k), NEG, device=device)
    finished_len = torch.zeros(b, k, dtype=torch.long, device=device)  # new tokens of each hypothesis
    is_finished = torch.zeros(b, k, dtype=torch.bool, device=device)
    improvable = torch.ones(b, 1, dtype=torch.bool, device=device)
    top_k_mask = torch.arange(c, device=device) < k  # (C,) the step's top K candidates
    offsets = (torch.arange(b, device=device) * k)[:, None]  # (B, 1) first row of each prompt

    logits = run.prefill() if max_new_tokens else None
    cur = t
    while logits is not None and cur < total:
        log_probs = torch.log_softmax(logits.float(), dim=-1)  # (B*K, V)
        vocab = log_probs.shape[-1]
        if processors:  # HF's processors act on each beam's log-probabilities
            ids = running.view(b * k, total)[:, :cur]  # (B*K, cur)
            for process in processors:
                log_probs = process(ids, log_probs)
        scores = (log_probs.view(b, k, vocab) + running_scores[:, :, None]).view(b, k * vocab)  # (B, K*V)
        top_scores, top_index = torch.topk(scores, c)  # (B, C)
        source = top_index // vocab  # (B, C) the beam each candidate extends
        tokens = top_index % vocab
        candidates = _gather(running, source)  # (B, C, L)
        candidates[:, :, cur] = tokens
        ends = torch.full((b, c), cur + 1 >= total, dtype=torch.bool, device=device)
        if eos is not None:
            ends = ends | torch.isin(tokens, eos)
        if stop is not None:
            rows = candidates[:, :, : cur + 1].reshape(b * c, cur + 1).tolist()  # (B*C, cur + 1)
            ends = ends | torch.tensor(stop(rows), device=device).view(b, c)  # (B, C)

        # the next running beams: the best K candidates that go on
        going = top_scores + ends.float() * NEG
        keep = torch.topk(going, k).indices  # (B, K)
        running, running_scores = _gather(candidates, keep), _gather(going, keep)
        rows_from = (_gather(source, keep) + offsets).view(-1)  # (B*K,) cache row each new beam continues

        # new hypotheses: top-K candidates that ended, length-penalised, merged with the kept ones
        just_ended = ends & top_k_mask[None, :]
        scored = top_scores / float(cur + 1 - t) ** length_penalty
        full = is_finished.all(dim=-1, keepdim=True) & (early_stopping is True)
        scored = scored + full.float() * NEG + (~improvable).float() * NEG + (~just_ended).float() * NEG
        merged_scores = torch.cat([finished_scores, scored], dim=1)  # (B, K + C)
        best = torch.topk(merged_scores, k).indices  # (B, K)
        finished = _gather(torch.cat([finished, candidates], dim=1), best)
        finished_scores = _gather(merged_scores, best)
        finished_len = _gather(torch.cat([finished_len, finished_len.new_full((b, c), cur + 1 - t)], dim=1), best)
        is_finished = _gather(torch.cat([is_finished, just_ended], dim=1), best)

        cur += 1
        best_len = (total if early_stopping == "never" and length_penalty > 0.0 else cur) - t
        best_running = running_scores[:, :1] / float(best_len) ** length_penalty  # (B, 1)
        worst_kept = torch.where(
            is_finished, finished_scores.min(dim=1, keepdim=True).values, torch.full_like(finished_scores, NEG)
        )  # (B, K)
        improvable = improvable & (best_running > worst_kept).any(dim=-1, keepdim=True)
        if not bool(improvable.any()) or (bool(is_finished.all()) and early_stopping is True) or bool(ends.all()):
            break
        run.reorder(rows_from)
        logits = run.step(running[:, :, cur - 1].reshape(-1))  # newest tokens (B*K,)
    n = num_return_sequences
    length = t + int(finished_len[:, :n].max()) if max_new_tokens else t
    return finished[:, :n, :length].reshape(b * n, length)  # (B*N, T + n)
