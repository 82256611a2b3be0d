"""Autoregressive generation with the KV cache, for decoder-only and encoder-decoder models.

``generate`` takes Hugging Face's argument names and keeps HF's contract, so both give the same tokens for the same
weights: greedy (``do_sample=False``), sampling (temperature → top-k → top-p → min-p), HF's logits processors
(repetition penalty, ``no_repeat_ngram_size``, ``bad_words_ids``, ``min_length``/``min_new_tokens``,
``suppress_tokens``, and the caller's own ``logits_processor=[...]``: anatomy.generation.processors), beam search
(``num_beams``, ``length_penalty``, ``early_stopping``: anatomy.generation.beam), ``num_return_sequences``,
``eos_token_id``, ``stop_strings`` (with ``tokenizer=``), ``stopping_criteria=[...]``, a ``streamer``,
``generation_config=`` and ``return_dict_in_generate`` (``sequences``, ``scores``, ``logits``: outputs.py).

Options come as in HF (anatomy.generation.options): keyword arguments over ``generation_config=`` over the model's
``generation_config``, which holds the model's special tokens, so a model stops at its own eos unless told
otherwise (``eos_token_id=None``: never). ``pad_token_id`` defaults to the first eos id.

Left-padded batches: ``attention_mask`` marks the real tokens; our models derive positions from it (a padded prompt
sees the same positions as the prompt alone) and it grows by one column of ones per step. Without a mask it is
inferred from ``pad_token_id`` by HF's rule: the tokens that are not the pad id, when the pad id occurs in the input
and is not an eos id. With an eos id, a row that has finished keeps emitting ``pad_token_id``; generation stops
when every row is done. The prefill and the cached steps are ``anatomy.generation.decoding.CachedDecoding``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from anatomy.generation.beam import beam_search
from anatomy.generation.compiled import check_compile
from anatomy.generation.continued import ContinuedDecoding, check_continuation
from anatomy.generation.decoding import CachedDecoding
from anatomy.generation.limits import check_limits
from anatomy.generation.options import (
    GenerationConfig,
    check_options,
    ignored_options,
    new_token_budget,
    read_options,
    resolve,
)
from anatomy.generation.outputs import GenerateOutput
from anatomy.generation.processors import Processor, build_processors, sampling_processors
from anatomy.generation.sampling import sample
from anatomy.generation.stopping import StopStrings
from anatomy.models.cache import ModelCache
from anatomy.models.common import ids_shape, key_padding


def _eos_tensor(eos_token_id: Any, device: torch.device) -> torch.Tensor | None:
    if eos_token_id is None:
        return None
    ids = [eos_token_id] if isinstance(eos_token_id, int) else list(eos_token_id)
    if not ids or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids):
        raise ValueError(f"eos_token_id must be a non-negative int or a list of them, got {eos_token_id!r}")
    return torch.tensor(ids, device=device)


def infer_mask(input_ids: torch.Tensor, pad_token_id: int | None, eos: torch.Tensor | None) -> torch.Tensor | None:
    """HF's rule for a missing ``attention_mask``: the non-pad tokens, when ``pad_token_id`` occurs in the input
    and is not an eos id; else None (every token is real)."""
    if pad_token_id is None or not bool((input_ids == pad_token_id).any()):
        return None
    if eos is not None and bool((eos == pad_token_id).any()):
        return None
    return input_ids != pad_token_id  # (B, T)


def model_generation_config(model: nn.Module) -> Any:
    """The model's own generation config (``model.generation_config``), or one made from its ``ModelConfig``."""
    found = getattr(model, "generation_config", None)
    return found if found is not None else GenerationConfig.from_model_config(getattr(model, "config", None))


@torch.inference_mode()
def generate(
    model: nn.Module,
    input_ids: torch.Tensor | None = None,
    attention_mask: torch.Tensor | None = None,
    *,
    generation_config: Any = None,
    logits_processor: Sequence[Processor] | None = None,
    stopping_criteria: Sequence[Any] | None = None,
    inputs_embeds: torch.Tensor | None = None,
    tokenizer: Any = None,
    streamer: Any = None,
    generator: torch.Generator | Sequence[torch.Generator] | None = None,
    fast: bool = True,
    compile: Any = "auto",
    past_key_values: Any = None,
    cache: Any = None,
    **kwargs: Any,
) -> Any:
    """Generate up to ``max_new_tokens`` (default 20, as HF; or HF's ``max_length``, prompt included) tokens per row.

    Returns ``(B * num_return_sequences, T + n)`` (prompt then new tokens) for a decoder-only LM, ``(..., 1 + n)``
    (start token then new tokens) for an encoder-decoder model, ``n <= max_new_tokens``; the sequences of one prompt
    are adjacent, as in HF. With ``return_dict_in_generate=True`` a ``GenerateOutput`` with ``sequences``,
    ``scores`` (``output_scores``: each step's processed scores ``(B, V)``) and ``logits`` (``output_logits``: the
    raw float32 logits). ``generator``: one ``torch.Generator`` for the draws, or one per output row (a row's draws
    then do not depend on what it is batched with). ``inputs_embeds (B, T, D)`` instead of ids (decoder-only): the
    sequences then hold only the new tokens, as in HF. Options that only shape another mode (``top_p`` under greedy
    decoding) are warned about and ignored, as HF does; values that cannot run raise ``ValueError`` naming them. The
    model runs in eval mode (its mode is restored afterwards). ``fast=False`` always runs the modules (``fast=True``
    flattens a DecoderLM's decode step, same numbers); ``compile`` (``"auto"``, ``True``, ``False``): decode with
    one compiled call of the forward on static caches per step (anatomy.generation.compiled: ``"auto"``
    compiles when the generation is long enough to repay the warm-up, or a graph for the same model and shapes is
    cached; the same tokens as eager decoding). ``use_cache`` is accepted for HF's sake: the cache is always used.
    ``past_key_values`` (or transformers 5's ``cache``): go on from a cache holding the first tokens of
    ``input_ids``, as a chat loop does (anatomy.generation.continued); the dict output's ``cache`` is the cache after
    the last step. Keyword options: anatomy.generation.options.OPTIONS.
    """
    if not hasattr(model, "new_caches"):
        raise TypeError(f"generate needs a model with a KV cache (DecoderLM or Seq2Seq), got {type(model).__name__}")
    if cache is not None:
        if past_key_values is not None:
            raise ValueError("give past_key_values or cache, not both (transformers 5 renamed one to the other)")
        past_key_values = cache
    said = set(kwargs) | set(read_options(generation_config))  # what the caller set: warned about when ignored
    o = ignored_options(resolve(model_generation_config(model), generation_config, kwargs), said)
    embeds_only = inputs_embeds is not None
    if inputs_embeds is not None:
        input_ids = _embeds_prompt(model, input_ids, inputs_embeds)
    if input_ids is None:
        raise ValueError("generate needs input_ids (B, T) or inputs_embeds (B, T, D)")
    b, t = ids_shape(input_ids)
    num_beams, copies_n = o["num_beams"], o["num_return_sequences"]
    # HF counts an encoder-decoder's max_length in decoder tokens (its start token), a decoder-only's in prompt + new
    counted = 1 if getattr(model, "is_encoder_decoder", False) else t
    max_new_tokens = new_token_budget(o["max_new_tokens"], o["max_length"], counted)
    check_options(
        do_sample=o["do_sample"],
        temperature=o["temperature"],
        top_k=o["top_k"],
        top_p=o["top_p"],
        min_p=o["min_p"],
        repetition_penalty=o["repetition_penalty"],
        num_beams=num_beams,
        length_penalty=o["length_penalty"],
        early_stopping=o["early_stopping"],
        num_return_sequences=copies_n,
        streamer=streamer,
    )
    check_limits(model, o, input_ids, embeds_only, max_new_tokens)  # inf/NaN values, an empty prompt, rows (limits.py)
    eos = _eos_tensor(o["eos_token_id"], input_ids.device)
    pad = o["pad_token_id"]
    if attention_mask is None and not embeds_only:
        attention_mask = infer_mask(input_ids, pad, eos)
    pad = pad if pad is not None else (None if eos is None else int(eos[0]))
    stop = None if o["stop_strings"] is None else StopStrings(o["stop_strings"], tokenizer)
    criteria = list(stopping_criteria or ())
    if not all(callable(c) for c in criteria):
        raise ValueError("stopping_criteria must hold callables (ids, scores) -> bool tensor (B,)")
    penalty = None if o["repetition_penalty"] in (None, 1.0) else float(o["repetition_penalty"])
    mask = key_padding(attention_mask, b, t)  # bool (B, T) or None, validated once
    copies = num_beams if num_beams > 1 else copies_n
    if copies > 1:  # each prompt's beams / samples are adjacent rows, as HF expands them
        input_ids = input_ids.repeat_interleave(copies, dim=0)  # (B * copies, T)
        mask = None if mask is None else mask.repeat_interleave(copies, dim=0)
    if num_beams > 1 and embeds_only:
        raise ValueError(f"inputs_embeds with num_beams={num_beams}: beam search here starts from input_ids")
    if num_beams > 1 and (o["output_scores"] or o["output_logits"] or criteria):
        raise ValueError(
            "output_scores, output_logits and stopping_criteria go with greedy decoding or sampling; "
            f"num_beams={num_beams} returns sequences only"
        )

    if past_key_values is not None:
        check_continuation(model, past_key_values, copies=copies, embeds=embeds_only)
    check_compile(compile)

    # eval mode for the generation, the mode restored after; a model already in eval mode throughout (the usual
    # case) is left alone: switching the modes walks every module twice, ~0.5 ms a call
    was_training = model.training
    switched = any(m.training for m in model.modules())
    if switched:
        model.eval()
    try:
        if past_key_values is not None:
            run: CachedDecoding = ContinuedDecoding(
                model, input_ids, mask, max_new_tokens, past_key_values=past_key_values, fast=fast, compile=compile
            )
        else:
            run = CachedDecoding(
                model,
                input_ids,
                mask,
                max_new_tokens,
                fast=fast,
                compile=compile,
                decoder_start_token_id=o["decoder_start_token_id"],
                inputs_embeds=inputs_embeds,
            )
        eos_ids = [] if eos is None else eos.tolist()
        processors = build_processors(
            penalty=penalty,
            prompt_mask=None if run.seq2seq or embeds_only else run.mask,
            eos=eos_ids,
            no_repeat_ngram_size=o["no_repeat_ngram_size"],
            bad_words_ids=o["bad_words_ids"],
            min_length=o["min_length"],
            min_new_tokens=o["min_new_tokens"],
            suppress_tokens=o["suppress_tokens"],
            prompt_length=run.prefix.shape[1] - run.visible_from,
            custom=logits_processor,
        )
        if num_beams > 1:
            sequences = beam_search(
                run,
                batch=b,
                num_beams=num_beams,
                max_new_tokens=max_new_tokens,
                eos=eos,
                pad=pad,
                length_penalty=1.0 if o["length_penalty"] is None else float(o["length_penalty"]),
                early_stopping=False if o["early_stopping"] is None else o["early_stopping"],
                num_return_sequences=copies_n,
                processors=processors,
                stop=stop,
            )
            result = GenerateOutput(sequences=sequences)
        else:
            warpers = (
                sampling_processors(
                    temperature=1.0 if o["temperature"] is None else o["temperature"],
                    top_k=o["top_k"],
                    top_p=o["top_p"],
                    min_p=o["min_p"],
                )
                if o["do_sample"]
                else []
            )
            result = _sample(
                run,
                max_new_tokens=max_new_tokens,
                eos=eos,
                pad=pad,
                processors=processors + warpers,
                do_sample=o["do_sample"],
                generator=generator,
                stop=stop,
                criteria=criteria,
                streamer=streamer,
                keep=(
                    o["return_dict_in_generate"] and o["output_scores"],
                    o["return_dict_in_generate"] and o["output_logits"],
                ),
            )
        if isinstance(run, ContinuedDecoding):
            result.cache = run.handed_back()  # always: the given cache is extended in place
        elif o["return_dict_in_generate"]:
            result.cache = ModelCache(run.final_caches())
    finally:
        if switched:
            model.train(was_training)
    if embeds_only and not run.seq2seq:
        result.sequences = result.sequences[:, t:]  # HF returns only the new tokens for an embeddings prompt
    return result if o["return_dict_in_generate"] else result.sequences


def _embeds_prompt(model: nn.Module, input_ids: torch.Tensor | None, inputs_embeds: torch.Tensor) -> torch.Tensor:
    """Placeholder ids ``(B, T)`` standing for an embeddings prompt ``(B, T, D)`` (the prefill reads the
    embeddings; the ids only give the batch and length, and the processors see them as HF sees its empty ids)."""
    if getattr(model, "is_encoder_decoder", False):
        raise ValueError("inputs_embeds goes with a decoder-only model here; give an encoder-decoder input_ids")
    if input_ids is not None:
        raise ValueError("give input_ids or inputs_embeds, not both")
    if not isinstance(inputs_embeds, torch.Tensor) or inputs_embeds.dim() != 3:
        raise ValueError(
            f"inputs_embeds must be a (B, T, D) tensor, got "
            f"{getattr(inputs_embeds, 'shape', type(inputs_embeds).__name__)}"
        )
    d = model.config.d_model  # type: ignore[union-attr]
    if inputs_embeds.shape[-1] != d:
        raise ValueError(f"inputs_embeds must be (B, T, D={d}), got {tuple(inputs_embeds.shape)}")
    b, t, _ = inputs_embeds.shape
    return torch.zeros(b, t, dtype=torch.long, device=inputs_embeds.device)  # (B, T)


def _as_done(value: Any, b: int, device: torch.device) -> torch.Tensor:
    """A stopping criterion's answer (a bool tensor ``(B,)``, or one bool for every row) as ``(B,)`` bool."""
    if isinstance(value, torch.Tensor):
        return value.to(device=device, dtype=torch.bool).reshape(-1).expand(b)
    return torch.full((b,), bool(value), dtype=torch.bool, device=device)


def _sample(
    run: CachedDecoding,
    *,
    max_new_tokens: int,
    eos: torch.Tensor | None,
    pad: int | None,
    processors: list[Processor],
    do_sample: bool,
    generator: torch.Generator | Sequence[torch.Generator] | None,
    stop: StopStrings | None,
    criteria: list[Any],
    streamer: Any,
    keep: tuple[bool, bool],
) -> GenerateOutput:
    """Greedy or sampled decoding, one token per row per step, HF's loop: raw float32 logits → processors →
    arg-max or a draw → finished rows get ``pad`` (when there is an eos) → stopping checks."""
    prefix = run.prefix
    b, t = prefix.shape
    first = run.visible_from  # an embeddings prompt: its placeholder ids are never shown, as HF starts from none
    seq = prefix.new_empty(b, t + max_new_tokens)  # (B, T + max_new_tokens), filled as we go
    seq[:, :t] = prefix
    rows = prefix[:, first:].tolist() if stop is not None else None  # the stop-string check reads Python lists
    finishing = eos is not None or stop is not None or bool(criteria)
    pads_finished = pad is not None and (eos is not None or any(hasattr(c, "eos_token_id") for c in criteria))
    if streamer is not None:
        streamer.put(prefix[:, first:].cpu())
    done = torch.zeros(b, dtype=torch.bool, device=prefix.device)
    scores_kept: list[torch.Tensor] = []
    logits_kept: list[torch.Tensor] = []
    n = 0
    logits = run.prefill() if max_new_tokens else None
    while logits is not None and n < max_new_tokens:
        raw = logits.float()  # (B, V); HF processes float32 logits
        if keep[1] and processors:
            raw = raw.clone()  # a caller's processor may write into its scores
        scores = raw
        if processors:
            ids = seq[:, first : t + n]
            for process in processors:
                scores = process(ids, scores)
        token = sample(scores, generator) if do_sample else scores.argmax(dim=-1)  # (B,)
        if keep[0]:
            scores_kept.append(scores)
        if keep[1]:
            logits_kept.append(raw)
        if pads_finished:
            token = token.masked_fill(done, pad)  # type: ignore[arg-type]
        seq[:, t + n] = token
        n += 1
        if eos is not None:
            done = done | torch.isin(token, eos)
        if stop is not None and rows is not None:
            for i, tok in enumerate(token.tolist()):
                rows[i].append(tok)
            hits = [not d and stop.matches(r) for d, r in zip(done.tolist(), rows)]
            done = done | torch.tensor(hits, device=done.device)
        for criterion in criteria:
            done = done | _as_done(
                criterion(seq[:, first : t + n], tuple(scores_kept) if keep[0] else None), b, done.device
            )
        if streamer is not None:
            streamer.put(token.cpu())
        if n == max_new_tokens or (finishing and bool(done.all())):
            break
        logits = run.step(token)  # decode one token
    if streamer is not None:
        streamer.end()
    return GenerateOutput(
        sequences=seq[:, : t + n],
        scores=tuple(scores_kept) if keep[0] else None,
        logits=tuple(logits_kept) if keep[1] else None,
    )
