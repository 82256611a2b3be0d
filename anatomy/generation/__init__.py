"""Generation: next-token rules (``sampling``), the KV-cached loop (``generate``), beam search (``beam``), stop
strings (``stopping``) and streaming to a terminal (``streaming``)."""

from anatomy.generation.generate import generate
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

__all__ = ["StopStrings", "TerminalStreamer", "apply_repetition_penalty", "apply_temperature", "generate", "greedy",
           "min_p_filter", "next_token", "sample", "seen_tokens", "top_k_filter", "top_p_filter"]
