"""``CachedDecoding``: one model's prefill and cached decode steps, shared by sampling and beam search.

    prefill   one forward over the prompt ``(B, T)`` fills every layer's cache with ``k, v: (B, Hkv, T, Dh)``
    decode    each step feeds only the newest token ``(B, 1)``; attention reads the cached keys and values, so a
              step costs O(S) instead of recomputing the whole O(S^2) prefix

A decoder-only mask covers the cache and grows by one real column per step. Encoder-decoder models encode the
source once; the decoder starts from ``decoder_start_token_id`` and each step's cross-attention reuses the memory
keys and values its cache projected at step 0. The decode steps call a flat view of the model
(``anatomy.generation.fast``: the same forward code without ``nn.Module``'s machinery, less Python per token)
unless ``fast.refusal(model)`` names a reason (hooks attached), or, when ``compile`` says so
(``anatomy.generation.compiled.decide``), one compiled call of the model's forward on static caches per step.
"""

from __future__ import annotations

import logging
import warnings
from typing import Any, cast

import torch
from torch import nn

from anatomy.generation import compiled
from anatomy.generation.fast import refusal
from anatomy.generation.flat import flat
from anatomy.models.cache import ModelCache
from anatomy.sizes import available_bytes, check_cache_fits

log = logging.getLogger("anatomy")


class CachedDecoding:
    def __init__(
        self,
        model: nn.Module,
        input_ids: torch.Tensor,
        mask: torch.Tensor | None,
        max_new_tokens: int,
        *,
        fast: bool = True,
        decoder_start_token_id: int | None = None,
        inputs_embeds: torch.Tensor | None = None,
        compile: Any = False,
        continued: bool = False,
    ) -> None:
        b = input_ids.shape[0]
        self.model = cast(Any, model)  # DecoderLM or Seq2Seq (their attributes are read below)
        self.mask = mask
        self.inputs_embeds = inputs_embeds  # (B, T, D): the prompt's token embeddings instead of a lookup
        self.visible_from = 0 if inputs_embeds is None else input_ids.shape[1]  # ids[:, :this] are placeholders
        self.seq2seq = bool(getattr(model, "is_encoder_decoder", False))  # Seq2Seq (HF's flag)
        capacity = (1 if self.seq2seq else input_ids.shape[1]) + max_new_tokens
        available = available_bytes(str(input_ids.device))  # read once for both checks below
        check_cache_fits(
            self.model.config,
            input_ids.shape[0],
            capacity,
            flags="max_new_tokens (or the batch)",
            device=str(input_ids.device),
            element_size=next(model.parameters()).element_size(),
            available=available,
        )
        self.caches = self.model.new_caches(capacity=capacity)  # reserved once, after the size check
        self.fast = fast
        self._stepper: Any = None  # the eager steps' model, made at the first eager step (``stepper``)
        if self.seq2seq:
            self.encoded = self.model.encoder(input_ids, mask)  # (B, S, D), computed once
            start = self.model.decoder_start_token_id if decoder_start_token_id is None else decoder_start_token_id
            self.prefix = input_ids.new_full((b, 1), start)  # (B, 1)
        else:
            self.prefix = input_ids
        self.grow = mask is not None and not self.seq2seq  # a decoder-only mask covers the cache
        self._ones = None if mask is None else mask.new_ones(b, 1)
        # the compiled step on static caches (compiled.py), when `compile` asks for it and it can run
        self.static: compiled.StaticDecoding | None = None
        self.static_steps = 0
        self.length = compiled.bucket(capacity)
        device = input_ids.device
        self.decision = compiled.decide(
            model,
            compile,
            rows=b,
            new_tokens=max_new_tokens,
            length=self.length,
            device=device,
            memory=input_ids.shape[1] if self.seq2seq else None,
            padded=mask is not None,
            continued=continued,
        )
        self.compiled, self.compile_reason = self.decision.compile, self.decision.why
        if self.compiled and self.length > capacity:
            try:  # the static caches hold up to twice the slots: refuse (stay eager) before allocating
                check_cache_fits(
                    self.model.config,
                    b,
                    self.length,
                    flags="max_new_tokens (or the batch)",
                    device=str(device),
                    element_size=next(model.parameters()).element_size(),
                    available=available,
                )
            except (ValueError, MemoryError) as error:
                self.compiled, self.compile_reason = False, str(error).splitlines()[0]
        if compile is True and not self.compiled:
            warnings.warn(f"compile=True: the decode step runs eagerly ({self.compile_reason})", stacklevel=4)
        if log.isEnabledFor(logging.INFO):
            log.info(
                "anatomy: the decode step runs %s (%s)", "compiled" if self.compiled else "eagerly", self.compile_reason
            )

    @property
    def stepper(self) -> Any:
        """The eager decode steps' model: a flat view (same code, no module machinery) unless hooks need the
        modules; made once, at the first eager step (a compiled generation never needs it)."""
        if self._stepper is None:
            self._stepper = flat(self.model) if self.fast and refusal(self.model) is None else self.model
        return self._stepper

    def _logits(self, ids: torch.Tensor, step: bool = True) -> torch.Tensor:
        """Last-position logits ``(B, V)`` after feeding ``ids: (B, T)`` on top of the cache: the head runs on the
        last position only (``logits_to_keep=1``; a prompt's other T - 1 rows of V logits are never made)."""
        model = self.stepper if step else self.model  # the prefill runs the modules (and any hook of prefill's)
        if self.seq2seq:
            out = model(
                attention_mask=self.mask,
                decoder_input_ids=ids,
                encoder_outputs=self.encoded,
                kv_caches=self.caches,
                use_cache=True,
                logits_to_keep=1,
            )
        else:
            out = model(ids, self.mask, kv_caches=self.caches, use_cache=True, logits_to_keep=1)
        logits: torch.Tensor = out.logits[:, -1]  # (B, V)
        return logits

    def prefill(self) -> torch.Tensor:
        if self.inputs_embeds is None:
            return self._logits(self.prefix, step=False)
        # an embeddings prompt: the token lookup of the placeholder ids answers with the given rows (times the
        # table's multiplier, as HF scales inputs_embeds where it scales looked-up rows); positions and the
        # embedding norm apply as for ids
        embeds = self.inputs_embeds
        table = self.model.embeddings.embed_tokens
        handle = table.register_forward_hook(
            lambda module, args, out: (embeds * getattr(module, "multiplier", 1.0)).to(out.dtype)
        )
        try:
            return self._logits(self.prefix, step=False)
        finally:
            handle.remove()

    def step(self, token: torch.Tensor) -> torch.Tensor:
        """Feed one new token per row ``(B,)``; return the next logits ``(B, V)``."""
        if self.compiled and self.static is None:
            self.static = compiled.StaticDecoding(
                self.model,
                self.caches,
                self.mask,
                length=self.length,
                key=cast(tuple[Any, ...], self.decision.key),
                seq2seq=self.seq2seq,
                encoded=self.encoded if self.seq2seq else None,
            )
        if self.static is not None:
            logits = self.static.step(token[:, None])
            if logits is not None:
                self.static_steps += 1
                return logits
            self._leave_static()  # the compilation failed: go on eagerly from what the static caches hold
        if self.grow and self.mask is not None and self._ones is not None:
            self.mask = torch.cat([self.mask, self._ones], dim=1)  # (B, S + 1)
        return self._logits(token[:, None])

    def _leave_static(self) -> None:
        assert self.static is not None
        self.caches, self.static, self.compiled = self.static.eager_caches(), None, False
        if self.grow and self.mask is not None and self.static_steps:
            self.mask = torch.cat([self.mask, self.mask.new_ones(self.mask.shape[0], self.static_steps)], dim=1)

    def final_caches(self) -> list[Any]:
        """The caches after the last step, as ordinary ``KVCache`` s (what ``generate`` hands back)."""
        return self.caches if self.static is None else self.static.eager_caches()

    def reorder(self, rows: torch.Tensor) -> None:
        """Row ``i`` continues from row ``rows[i]`` (beam search). The masks and the encoder memory are equal
        within a prompt's beams (running beams hold no padding), so only the caches move."""
        if self.static is not None:
            self.static.reorder(rows)
        else:
            ModelCache(self.caches).reorder_cache(rows)
