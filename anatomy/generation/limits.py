"""Limits on what ``generate`` is asked for, checked before anything is allocated or drawn.

    check_values(o)                                        # a float option that is inf or NaN: ValueError naming it
    check_prompt(input_ids, embeds_only)                   # an empty prompt: ValueError, not an IndexError inside
    check_rows(config, batch, copies, length, device=...)  # B x copies rows whose KV cache cannot fit: SizeError
    check_seed(seed, rows, flag="--seed")                  # seed + row must be a seed torch.Generator takes
    check_output_fits(rows, tokens, flags=...)             # the command line's sliding window: the text it keeps

``temperature=inf`` (every token equally likely) and ``length_penalty=nan`` (every beam's score NaN) would run and
give a silently meaningless text; Hugging Face's own checks let them through too, so refusing them is no
difference in what can run, only in what is said.
"""

from __future__ import annotations

import math
from typing import Any

from anatomy.sizes import _refuse_over, check_cache_fits

FLOATS = ("temperature", "top_p", "min_p", "repetition_penalty", "length_penalty")
SEEDS = (-(2**63), 2**64 - 1)  # what torch.Generator.manual_seed takes
GENERATOR_BYTES = 5056  # one torch.Generator's CPU state (the command line makes one per output row)
TOKEN_BYTES = 48  # a generated token kept by the command line: a Python int in a list and its text, generously


def check_values(options: dict[str, Any], prefix: str = "") -> None:
    """Every float option that is set is a finite number (``prefix``: ``"--"`` for the command line's names)."""
    for name in FLOATS:
        value = options.get(name)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and not math.isfinite(value):
            shown = prefix + name.replace("_", "-") if prefix else name
            raise ValueError(f"{shown} must be a finite number, got {value}")


def check_prompt(shape: tuple[int, int], embeds_only: bool) -> None:
    """A prompt of at least one token: the first step reads the prompt's last position."""
    if shape[1] == 0 and not embeds_only:
        raise ValueError(
            f"generate needs a prompt of at least one token; input_ids has shape {tuple(shape)} "
            "(start from the model's bos token, or pass inputs_embeds)"
        )


def check_rows(config: Any, batch: int, copies: int, length: int, *, device: str = "cpu", size: int = 4) -> None:
    """``batch * copies`` rows (``num_return_sequences`` or ``num_beams`` copies of each prompt) must have room for
    their KV cache of ``length`` positions; refused naming the copies before the prompts are repeated."""
    if copies > 1 and config is not None:
        check_cache_fits(
            config,
            batch * copies,
            length,
            flags=f"num_return_sequences / num_beams ({copies} copies of each prompt)",
            device=device,
            element_size=size,
        )


def check_seed(seed: int, rows: int, flag: str = "--seed") -> None:
    """Row ``r`` draws from a generator seeded ``seed + r``: every one must be a seed ``torch.Generator`` takes."""
    low, high = SEEDS
    if not low <= seed <= high - (rows - 1):
        top = f"2**64 - {rows}" if rows > 1 else "2**64 - 1"
        raise ValueError(
            f"{flag} must be an integer in [-2**63, {top}] (row r of the output draws with seed {flag} + r), got {seed}"
        )


def check_output_fits(rows: int, tokens: int, *, flags: str, per_row: int = 0, available: int | None = None) -> None:
    """The ids and text the command line keeps for ``rows`` outputs of ``tokens`` tokens each (and ``per_row``
    bytes more for each row: its generator) must fit."""
    _refuse_over(
        rows * (tokens * TOKEN_BYTES + per_row),
        what=f"{rows} output(s) of {tokens if tokens < 10**7 else f'~10^{len(str(tokens)) - 1}'} tokens",
        part=f"the generated tokens, about {TOKEN_BYTES} bytes each as ids and text",
        flags=flags,
        available=available,
    )


def check_limits(model: Any, options: dict[str, Any], input_ids: Any, embeds_only: bool, max_new_tokens: int) -> None:
    """``generate``'s checks of this module, in one call (after ``options.check_options``)."""
    b, t = int(input_ids.shape[0]), int(input_ids.shape[1])
    check_values(options)
    check_prompt((b, t), embeds_only)
    beams, copies = options.get("num_beams") or 1, options.get("num_return_sequences") or 1
    seq2seq = bool(getattr(model, "is_encoder_decoder", False))
    first = next(iter(model.parameters()), None)
    check_rows(
        getattr(model, "config", None),
        b,
        beams if beams > 1 else copies,
        (1 if seq2seq else t) + max_new_tokens,
        device=str(input_ids.device),
        size=4 if first is None else first.element_size(),
    )
