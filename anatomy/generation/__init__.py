"""Generation: next-token rules (``sampling``), HF's logits processors (``processors``), the KV-cached loop
(``generate``), its options and ``GenerationConfig`` (``options``), ``return_dict_in_generate``'s result
(``outputs``), beam search (``beam``), stop strings (``stopping``) and streaming to a terminal (``streaming``)."""

from anatomy.generation.generate import generate
from anatomy.generation.options import GenerationConfig
from anatomy.generation.outputs import GenerateOutput
from anatomy.generation.sampling import (
    apply_repetition_penalty,
    apply_temperature,
    greedy,
    min_p_filter,
    next_token,
    sample,
    seen_tokens,
    top_k_filter,
    top_p_filter,
)
from anatomy.generation.stopping import StopStrings
from anatomy.generation.streaming import TerminalStreamer

__all__ = [
    "GenerateOutput",
    "GenerationConfig",
    "StopStrings",
    "TerminalStreamer",
    "apply_repetition_penalty",
    "apply_temperature",
    "generate",
    "greedy",
    "min_p_filter",
    "next_token",
    "sample",
    "seen_tokens",
    "top_k_filter",
    "top_p_filter",
]
