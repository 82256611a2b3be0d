"""The methods a Hugging Face user calls on a model object: ``num_parameters()`` and ``generate()``.

``generate`` takes HF's argument names and delegates to ``anatomy.generation.generate`` (imported when called:
generation sits above the models, as HF's ``GenerationMixin`` sits beside ``PreTrainedModel``).
"""

from __future__ import annotations

import torch
from torch import nn


def embedding_parameter_names(model: nn.Module) -> set[str]:
    """Names of the embedding tables' weights (token, token-type, learned positions, T5's bias buckets): what
    HF's ``num_parameters(exclude_embeddings=True)`` leaves out (every ``nn.Embedding``; our learned positions
    table is the ``nn.Embedding`` ``wpe`` of GPT-2)."""
    from anatomy.components.positional import LearnedPositional

    return {f"{name}.weight" if name else "weight" for name, m in model.named_modules()
            if isinstance(m, (nn.Embedding, LearnedPositional))}


class PretrainedMethods:
    """Mixed into every model class: HF's ``num_parameters``."""

    def num_parameters(self, only_trainable: bool = False, exclude_embeddings: bool = False) -> int:
        """Parameters counted once each (a tied head shares the embedding's); as HF's ``PreTrainedModel``."""
        skip = embedding_parameter_names(self) if exclude_embeddings else set()
        return sum(p.numel() for name, p in self.named_parameters()
                   if name not in skip and (p.requires_grad or not only_trainable))


class GenerationMethods(PretrainedMethods):
    """Mixed into ``DecoderLM`` and ``Seq2Seq``: ``model.generate(input_ids, ...)`` with HF's argument names."""

    def generate(self, input_ids: torch.Tensor | None = None, attention_mask: torch.Tensor | None = None,
                 **kwargs) -> torch.Tensor:
        """See ``anatomy.generation.generate`` for every argument (max_new_tokens, do_sample, temperature, top_k,
        top_p, min_p, repetition_penalty, num_beams, length_penalty, early_stopping, num_return_sequences,
        eos_token_id, pad_token_id, stop_strings + tokenizer, streamer). ``inputs=`` is HF's other name for
        ``input_ids``; ``max_length`` counts the prompt, as in HF."""
        from anatomy.generation import generate

        if "inputs" in kwargs:
            if input_ids is not None:
                raise ValueError("give input_ids or inputs, not both")
            input_ids = kwargs.pop("inputs")
        if input_ids is None:
            raise ValueError("generate needs input_ids (B, T)")
        return generate(self, input_ids, attention_mask, **kwargs)
