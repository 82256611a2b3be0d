"""The methods a Hugging Face user calls on a model object: ``num_parameters()``, ``generate()`` and
``generation_config``.

``generate`` takes HF's argument names and delegates to ``anatomy.generation.generate`` (imported when called:
generation sits above the models, as HF's ``GenerationMixin`` sits beside ``PreTrainedModel``).
``model.generation_config`` starts as the model's special tokens (``ModelConfig``'s bos, eos, pad) and may be edited
or replaced (ours or a ``transformers.GenerationConfig``), as in HF.
"""

from __future__ import annotations

from typing import Any

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
        module: Any = self  # mixed into an nn.Module
        skip = embedding_parameter_names(module) if exclude_embeddings else set()
        return sum(p.numel() for name, p in module.named_parameters()
                   if name not in skip and (p.requires_grad or not only_trainable))


class GenerationMethods(PretrainedMethods):
    """Mixed into ``DecoderLM`` and ``Seq2Seq``: ``model.generate(input_ids, ...)`` with HF's argument names."""

    @property
    def generation_config(self) -> Any:
        """The defaults ``generate`` starts from (HF's ``model.generation_config``): made from the model's
        ``ModelConfig`` special tokens on first use, then kept (edit it, or assign another)."""
        found = self.__dict__.get("_generation_config")
        if found is None:
            from anatomy.generation.options import GenerationConfig

            found = GenerationConfig.from_model_config(getattr(self, "config", None))
            self.__dict__["_generation_config"] = found
        return found

    @generation_config.setter
    def generation_config(self, value: Any) -> None:
        self.__dict__["_generation_config"] = value

    def generate(self, input_ids: torch.Tensor | None = None, attention_mask: torch.Tensor | None = None,
                 **kwargs: Any) -> Any:
        """See ``anatomy.generation.generate`` for every argument (max_new_tokens, do_sample, temperature, top_k,
        top_p, min_p, repetition_penalty, no_repeat_ngram_size, bad_words_ids, min_new_tokens, suppress_tokens,
        num_beams, length_penalty, early_stopping, num_return_sequences, eos_token_id, pad_token_id,
        stop_strings + tokenizer, streamer, generation_config, logits_processor, stopping_criteria,
        return_dict_in_generate, output_scores, output_logits, inputs_embeds). ``inputs=`` is HF's other name for
        ``input_ids``; ``max_length`` counts the prompt, as in HF."""
        from anatomy.generation import generate

        if "inputs" in kwargs:
            if input_ids is not None:
                raise ValueError("give input_ids or inputs, not both")
            input_ids = kwargs.pop("inputs")
        if input_ids is None and kwargs.get("inputs_embeds") is None:
            raise ValueError("generate needs input_ids (B, T) or inputs_embeds (B, T, D)")
        module: Any = self  # mixed into an nn.Module
        return generate(module, input_ids, attention_mask, **kwargs)
