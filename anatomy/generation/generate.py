"""Autoregressive generation with the KV cache, for decoder-only and encoder-decoder models.

    prefill   one forward over the prompt ``(B, T)`` fills every layer's cache with ``k, v: (B, Hkv, T, Dh)``
    decode    each step feeds only the newest token ``(B, 1)``; attention reads the cached keys and values, so a
              step costs O(S) instead of recomputing the whole O(S^2) prefix

Left-padded batches: ``attention_mask`` marks the real tokens; our models derive positions from it (a padded prompt
sees the same positions as the prompt alone) and it grows by one column of ones per step. A row that has emitted
``eos_token_id`` keeps emitting ``pad_token_id``; generation stops when every row is done. This is the contract of
Hugging Face's ``generate(do_sample=False)``, so both give the same tokens for the same weights.

Encoder-decoder models encode the source once; the decoder starts from ``decoder_start_token_id`` and each step's
cross-attention reuses the memory keys and values its cache projected at step 0.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from anatomy.generation.fast import DecodeStep, refusal
from anatomy.generation.sampling import next_token
from anatomy.models.common import ids_shape, key_padding, make_positions
from anatomy.models.seq2seq import Seq2Seq
from anatomy.sizes import check_cache_fits


def _eos_tensor(eos_token_id: int | Sequence[int] | None, device) -> torch.Tensor | None:
    if eos_token_id is None:
        return None
    ids = [eos_token_id] if isinstance(eos_token_id, int) else list(eos_token_id)
    if not ids or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids):
        raise ValueError(f"eos_token_id must be a non-negative int or a list of them, got {eos_token_id!r}")
    return torch.tensor(ids, device=device)


@torch.inference_mode()
def generate(model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, *,
             max_new_tokens: int = 32, eos_token_id: int | Sequence[int] | None = None,
             pad_token_id: int | None = None, do_sample: bool = False, temperature: float = 1.0,
             top_k: int | None = None, top_p: float | None = None, generator: torch.Generator | None = None,
             decoder_start_token_id: int | None = None, fast: bool = True) -> torch.Tensor:
    """Generate up to ``max_new_tokens`` tokens per row.

    Returns ``(B, T + n)`` (prompt then new tokens) for a decoder-only LM, ``(B, 1 + n)`` (start token then new
    tokens) for an encoder-decoder model, ``n <= max_new_tokens``. ``pad_token_id`` defaults to the first eos id.
    The model runs in eval mode (its mode is restored afterwards). ``fast=True`` decodes a DecoderLM with the
    flattened step of ``anatomy.generation.fast`` (same numbers, less Python per token) unless
    ``fast.refusal(model)`` names a reason not to; ``fast=False`` always runs the modules.
    """
    b, _ = ids_shape(input_ids)
    if not hasattr(model, "new_caches"):
        raise TypeError(f"generate needs a model with a KV cache (DecoderLM or Seq2Seq), got {type(model).__name__}")
    if not isinstance(max_new_tokens, int) or isinstance(max_new_tokens, bool) or max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be a non-negative integer, got {max_new_tokens!r}")
    eos = _eos_tensor(eos_token_id, input_ids.device)
    pad = pad_token_id if pad_token_id is not None else (None if eos is None else int(eos[0]))
    sampling = dict(do_sample=do_sample, temperature=temperature, top_k=top_k, top_p=top_p, generator=generator)
    mask = key_padding(attention_mask, b, input_ids.shape[1])  # bool (B, T) or None, validated once
    seq2seq = isinstance(model, Seq2Seq)

    was_training = model.training
    model.eval()
    try:
        capacity = (1 if seq2seq else input_ids.shape[1]) + max_new_tokens
        check_cache_fits(model.config, b, capacity, flags="max_new_tokens (or the batch)", device=str(input_ids.device),
                         element_size=next(model.parameters()).element_size())  # before the buffers are reserved
        caches = model.new_caches(capacity=capacity)
        if seq2seq:
            encoded = model.encoder(input_ids, mask)  # (B, S, D), computed once
            start = model.decoder_start_token_id if decoder_start_token_id is None else decoder_start_token_id
            prefix = input_ids.new_full((b, 1), start)  # (B, 1)

            def step(ids: torch.Tensor) -> torch.Tensor:
                out = model(attention_mask=mask, decoder_input_ids=ids, encoder_outputs=encoded, kv_caches=caches,
                            use_cache=True)
                return out.logits[:, -1]  # (B, V)
        else:
            prefix = input_ids
            flat = DecodeStep(model, caches) if fast and refusal(model) is None else None

            def step(ids: torch.Tensor) -> torch.Tensor:
                if flat is not None and ids.shape[1] == 1:
                    positions = make_positions(mask, 1, caches[0].seen, ids.device)  # (B|1, 1)
                    return flat(ids[:, 0], positions, mask)  # (B, V)
                return model(ids, mask, kv_caches=caches, use_cache=True).logits[:, -1]  # (B, V)
        grow = mask is not None and not seq2seq  # a decoder-only mask covers the cache: one more real column
        ones = None if mask is None else mask.new_ones(b, 1)

        new: list[torch.Tensor] = []  # one (B,) tensor per step; stacked once at the end
        done = torch.zeros(b, dtype=torch.bool, device=input_ids.device)
        n = 0
        logits = step(prefix) if max_new_tokens else None  # prefill
        while n < max_new_tokens:
            token = next_token(logits, **sampling)  # (B,)
            if eos is not None:
                token = token.masked_fill(done, pad)
                done = done | torch.isin(token, eos)
            new.append(token)
            n += 1
            if n == max_new_tokens or (eos is not None and bool(done.all())):
                break
            if grow:
                mask = torch.cat([mask, ones], dim=1)  # (B, S + 1)
            logits = step(token[:, None])  # decode one token
        return torch.cat([prefix, *(t[:, None] for t in new)], dim=1)  # (B, T + n)
    finally:
        model.train(was_training)
