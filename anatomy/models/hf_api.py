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

    return {
        f"{name}.weight" if name else "weight"
        for name, m in model.named_modules()
        if isinstance(m, (nn.Embedding, LearnedPositional))
    }


def _lens_weight(name: str) -> property:
    def get(self: nn.Module) -> torch.Tensor:
        from anatomy.inspection.tl_weights import tl_weight

        return tl_weight(self, name)

    return property(get, doc=f"TransformerLens's ``{name}`` in its shape (anatomy.inspection.tl_weights).")


class LensMethods:
    """TransformerLens's calls on every model (anatomy.inspection.hooked does the work, imported when called, as
    ``generate`` below): ``run_with_cache``, ``run_with_hooks``, ``hook_dict``, ``add_hook``, ``to_tokens``...,
    ``W_Q``... in TransformerLens's shapes."""

    def run_with_cache(self, *args: Any, **kwargs: Any) -> Any:
        """``logits, cache = model.run_with_cache(ids)``; see ``anatomy.inspection.hooked.run_with_cache``."""
        from anatomy.inspection.hooked import run_with_cache

        return run_with_cache(self, *args, **kwargs)  # type: ignore[arg-type]  # mixed into nn.Module

    def run_with_hooks(self, *args: Any, **kwargs: Any) -> Any:
        """``model.run_with_hooks(ids, fwd_hooks=[(name_or_filter, fn(act, hook))])``; see
        ``anatomy.inspection.hooked.run_with_hooks``."""
        from anatomy.inspection.hooked import run_with_hooks

        return run_with_hooks(self, *args, **kwargs)  # type: ignore[arg-type]  # mixed into nn.Module

    def hooks(self, *args: Any, **kwargs: Any) -> Any:
        """``with model.hooks(fwd_hooks=[...]):``; see ``anatomy.inspection.hooked.hooks``."""
        from anatomy.inspection.hooked import hooks

        return hooks(self, *args, **kwargs)  # type: ignore[arg-type]  # mixed into nn.Module

    @property
    def hook_dict(self) -> Any:
        """TransformerLens's ``hook_dict``: one hook point per name (anatomy.inspection.tl_surface)."""
        from anatomy.inspection.tl_surface import hook_dict

        return hook_dict(self)  # type: ignore[arg-type]  # mixed into nn.Module

    @property
    def mod_dict(self) -> Any:
        """TransformerLens's ``mod_dict``: modules by its names and ours, and the hook points."""
        from anatomy.inspection.tl_surface import mod_dict

        return mod_dict(self)  # type: ignore[arg-type]  # mixed into nn.Module

    @property
    def cfg(self) -> Any:
        """TransformerLens's ``cfg`` names for our sizes (``n_layers``, ``d_head``, ``d_mlp``...); ours: ``config``."""
        from anatomy.inspection.tl_surface import lens_config

        return lens_config(self)  # type: ignore[arg-type]  # mixed into nn.Module

    def add_hook(self, *args: Any, **kwargs: Any) -> None:
        """``model.add_hook(name_or_filter, fn)``: kept until ``reset_hooks()`` (anatomy.inspection.tl_surface)."""
        from anatomy.inspection.tl_surface import add_hook

        add_hook(self, *args, **kwargs)  # type: ignore[arg-type]  # mixed into nn.Module

    def reset_hooks(self, *args: Any, **kwargs: Any) -> None:
        """Remove what ``add_hook`` attached (``including_permanent=True``: the permanent ones too)."""
        from anatomy.inspection.tl_surface import reset_hooks

        reset_hooks(self, *args, **kwargs)  # type: ignore[arg-type]  # mixed into nn.Module

    def to_tokens(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        """TransformerLens's ``to_tokens`` with the tokenizer that travelled with the model (``model.tokenizer``)."""
        from anatomy.inspection.tl_tokens import to_tokens

        return to_tokens(self, *args, **kwargs)  # type: ignore[arg-type]  # mixed into nn.Module

    def to_single_token(self, string: str) -> int:
        """TransformerLens's ``to_single_token``: the id of a one-token text (``model.tokenizer``)."""
        from anatomy.inspection.tl_tokens import to_single_token

        return to_single_token(self, string)  # type: ignore[arg-type]  # mixed into nn.Module

    def to_string(self, *args: Any, **kwargs: Any) -> Any:
        """TransformerLens's ``to_string``: ids → text (``model.tokenizer``)."""
        from anatomy.inspection.tl_tokens import to_string

        return to_string(self, *args, **kwargs)  # type: ignore[arg-type]  # mixed into nn.Module

    def to_str_tokens(self, *args: Any, **kwargs: Any) -> Any:
        """TransformerLens's ``to_str_tokens``: each token's text (``model.tokenizer``)."""
        from anatomy.inspection.tl_tokens import to_str_tokens

        return to_str_tokens(self, *args, **kwargs)  # type: ignore[arg-type]  # mixed into nn.Module

    W_E, W_pos, W_U, b_U = (_lens_weight(n) for n in ("W_E", "W_pos", "W_U", "b_U"))
    W_Q, W_K, W_V, W_O = (_lens_weight(n) for n in ("W_Q", "W_K", "W_V", "W_O"))
    b_Q, b_K, b_V, b_O = (_lens_weight(n) for n in ("b_Q", "b_K", "b_V", "b_O"))
    W_in, W_gate, W_out, b_in, b_out = (_lens_weight(n) for n in ("W_in", "W_gate", "W_out", "b_in", "b_out"))


class PretrainedMethods(LensMethods):
    """Mixed into every model class: HF's ``num_parameters``."""

    def num_parameters(self, only_trainable: bool = False, exclude_embeddings: bool = False) -> int:
        """Parameters counted once each (a tied head shares the embedding's); as HF's ``PreTrainedModel``."""
        module: Any = self  # mixed into an nn.Module
        skip = embedding_parameter_names(module) if exclude_embeddings else set()
        return sum(
            p.numel()
            for name, p in module.named_parameters()
            if name not in skip and (p.requires_grad or not only_trainable)
        )


class GenerationMethods(PretrainedMethods):
    """Mixed into ``DecoderLM`` and ``Seq2Seq``: ``model.generate(input_ids, ...)`` with HF's argument names."""

    # HF's flag (``config.is_encoder_decoder``): generation and inspection read it instead of importing the model
    # classes, so they never import models/lm.py or models/seq2seq.py, which import this module (no cycle)
    is_encoder_decoder: bool = False

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

    def generate(
        self, input_ids: torch.Tensor | None = None, attention_mask: torch.Tensor | None = None, **kwargs: Any
    ) -> Any:
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
