"""Generation: next-token rules (``sampling``) and the KV-cached loop (``generate``)."""

from anatomy.generation.generate import generate
from anatomy.generation.sampling import apply_temperature, greedy, next_token, sample, top_k_filter, top_p_filter

__all__ = ["apply_temperature", "generate", "greedy", "next_token", "sample", "top_k_filter", "top_p_filter"]
