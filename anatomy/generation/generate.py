"""Autoregressive generation with the KV cache, for decoder-only and encoder-decoder models.

``generate`` takes Hugging Face's argument names and keeps HF's contract, so both give the same tokens for the same
weights: greedy (``do_sample=False``), sampling (temperature → top-k → top-p → min-p), the repetition penalty
(greedy or sampled), beam search (``num_beams``, ``length_penalty``, ``early_stopping``: anatomy.generation.beam),
``num_return_sequences``, ``eos_token_id``, ``stop_strings`` (with ``tokenizer=``) and a ``streamer``.

Left-padded batches: ``attention_mask`` marks the real tokens; our models derive positions from it (a padded prompt
sees the same positions as the prompt alone) and it grows by one column of ones per step. A row that has emitted
``eos_token_id`` or completed a stop string keeps emitting ``pad_token_id``; generation stops when every row is
done. The prefill and the cached steps are ``anatomy.generation.decoding.CachedDecoding``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from anatomy.generation.beam import beam_search
from anatomy.generation.decoding import CachedDecoding
from anatomy.generation.options import check_options, new_token_budget
from anatomy.generation.sampling import apply_repetition_penalty, next_token, seen_tokens
from anatomy.generation.stopping import StopStrings
from anatomy.models.common import ids_shape, key_padding


def _eos_tensor(eos_token_id: int | Sequence[int] | None, device) -> torch.Tensor | None:
    if eos_token_id is None:
        return None
    ids = [eos_token_id] if isinstance(eos_token_id, int) else list(eos_token_id)
    if not ids or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids):
        raise ValueError(f"eos_token_id must be a non-negative int or a list of them, got {eos_token_id!r}")
    return torch.tensor(ids, device=device)


@torch.inference_mode()
def generate(model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, *,
             max_new_tokens: int | None = None, max_length: int | None = None,
             eos_token_id: int | Sequence[int] | None = None, pad_token_id: int | None = None,
             do_sample: bool = False, temperature: float | None = None, top_k: int | None = None,
             top_p: float | None = None, min_p: float | None = None, repetition_penalty: float | None = None,
             num_beams: int = 1, length_penalty: float | None = None, early_stopping: bool | str | None = None,
             num_return_sequences: int = 1, stop_strings: str | Sequence[str] | None = None, tokenizer=None,
             streamer=None, generator: torch.Generator | None = None, decoder_start_token_id: int | None = None,
             use_cache: bool = True, fast: bool = True) -> torch.Tensor:
    """Generate up to ``max_new_tokens`` (default 32; or HF's ``max_length``, prompt included) tokens per row.

    Returns ``(B * num_return_sequences, T + n)`` (prompt then new tokens) for a decoder-only LM, ``(..., 1 + n)``
    (start token then new tokens) for an encoder-decoder model, ``n <= max_new_tokens``; the sequences of one
    prompt are adjacent, as in HF. ``pad_token_id`` defaults to the first eos id. Options that contradict each
    other (``top_p`` with ``do_sample=False``, ``length_penalty`` without beams, ...) raise ``ValueError`` naming
    both. The model runs in eval mode (its mode is restored afterwards). ``fast=False`` always runs the modules
    (``fast=True`` flattens a DecoderLM's decode step, same numbers); ``use_cache`` is accepted for HF's sake:
    the cache is always used.
    """
    b, t = ids_shape(input_ids)
    if not hasattr(model, "new_caches"):
        raise TypeError(f"generate needs a model with a KV cache (DecoderLM or Seq2Seq), got {type(model).__name__}")
    max_new_tokens = new_token_budget(max_new_tokens, max_length, t)
    check_options(do_sample=do_sample, temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p,
                  repetition_penalty=repetition_penalty, num_beams=num_beams, length_penalty=length_penalty,
                  early_stopping=early_stopping, num_return_sequences=num_return_sequences, streamer=streamer)
    eos = _eos_tensor(eos_token_id, input_ids.device)
    pad = pad_token_id if pad_token_id is not None else (None if eos is None else int(eos[0]))
    stop = None if stop_strings is None else StopStrings(stop_strings, tokenizer)
    if stop is not None and pad is None and b * num_return_sequences > 1:
        raise ValueError("stop_strings on several rows needs pad_token_id (or eos_token_id) to fill finished rows")
    penalty = None if repetition_penalty in (None, 1.0) else float(repetition_penalty)
    mask = key_padding(attention_mask, b, t)  # bool (B, T) or None, validated once
    copies = num_beams if num_beams > 1 else num_return_sequences
    if copies > 1:  # each prompt's beams / samples are adjacent rows, as HF expands them
        input_ids = input_ids.repeat_interleave(copies, dim=0)  # (B * copies, T)
        mask = None if mask is None else mask.repeat_interleave(copies, dim=0)

    was_training = model.training
    model.eval()
    try:
        run = CachedDecoding(model, input_ids, mask, max_new_tokens, fast=fast,
                             decoder_start_token_id=decoder_start_token_id)
        if num_beams > 1:
            return beam_search(run, batch=b, num_beams=num_beams, max_new_tokens=max_new_tokens, eos=eos, pad=pad,
                               length_penalty=1.0 if length_penalty is None else float(length_penalty),
                               early_stopping=False if early_stopping is None else early_stopping,
                               num_return_sequences=num_return_sequences, penalty=penalty, stop=stop)
        sampling = dict(do_sample=do_sample, temperature=1.0 if temperature is None else temperature, top_k=top_k,
                        top_p=top_p, min_p=min_p, generator=generator)
        return _sample(run, max_new_tokens, eos, pad, penalty, stop, streamer, sampling)
    finally:
        model.train(was_training)


def _sample(run: CachedDecoding, max_new_tokens: int, eos, pad, penalty, stop, streamer, sampling) -> torch.Tensor:
    """Greedy or sampled decoding, one token per row per step."""
    prefix = run.prefix
    b = prefix.shape[0]
    finishing = eos is not None or stop is not None
    rows = prefix.tolist() if stop is not None else None  # the stop-string check reads Python lists
    if streamer is not None:
        streamer.put(prefix.cpu())
    new: list[torch.Tensor] = []  # one (B,) tensor per step; stacked once at the end
    done = torch.zeros(b, dtype=torch.bool, device=prefix.device)
    seen = None
    n = 0
    logits = run.prefill() if max_new_tokens else None
    while n < max_new_tokens:
        if penalty is not None:
            if seen is None:
                seen = seen_tokens(prefix, logits.shape[-1], None if run.seq2seq else run.mask)  # (B, V)
            logits = apply_repetition_penalty(logits, seen, penalty)
        token = next_token(logits, **sampling)  # (B,)
        if finishing:
            if pad is not None:
                token = token.masked_fill(done, pad)
            if eos is not None:
                done = done | torch.isin(token, eos)
            if stop is not None:
                for i, tok in enumerate(token.tolist()):
                    rows[i].append(tok)
                hits = [not d and stop.matches(r) for d, r in zip(done.tolist(), rows)]
                done = done | torch.tensor(hits, device=done.device)
        if seen is not None:
            seen.scatter_(1, token[:, None], True)
        if streamer is not None:
            streamer.put(token.cpu())
        new.append(token)
        n += 1
        if n == max_new_tokens or (finishing and bool(done.all())):
            break
        logits = run.step(token)  # decode one token
    if streamer is not None:
        streamer.end()
    return torch.cat([prefix, *(t[:, None] for t in new)], dim=1)  # (B, T + n)
