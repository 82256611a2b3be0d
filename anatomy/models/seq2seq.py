"""Encoder-decoder (the 2017 paper's model, T5): the decoder attends to the encoder's output."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import torch
import torch.nn.functional as F
from torch import nn

from anatomy.components.context import hf_padding, key_padding
from anatomy.components.masks import as_attention_mask
from anatomy.models.cache import close_cache, open_cache
from anatomy.models.common import ids_shape, keep_positions
from anatomy.models.decoder import Decoder, DecoderStack
from anatomy.models.encoder import Encoder, EncoderStack
from anatomy.models.hf_api import GenerationMethods
from anatomy.models.outputs import EncoderOutput, OutputFlags, Seq2SeqOutput, output_flags

if TYPE_CHECKING:
    from typing_extensions import Unpack


def shift_right(labels: torch.Tensor, start_token_id: int) -> torch.Tensor:
    """Teacher forcing: the decoder input is the target shifted right by one, starting with ``start_token_id``."""
    shifted = labels.new_full(labels.shape, start_token_id)
    shifted[:, 1:] = labels[:, :-1]
    return shifted.masked_fill(shifted == -100, start_token_id)


class EncoderDecoderStack(nn.Module):
    """The body of ``nn.Transformer``: an ``EncoderStack`` and a ``DecoderStack`` over hidden states."""

    def __init__(self, *, encoder: EncoderStack, decoder: DecoderStack) -> None:
        super().__init__()
        self.encoder, self.decoder = encoder, decoder

    def forward(
        self,
        src: torch.Tensor,
        tgt: torch.Tensor,
        *,
        src_key_padding_mask: torch.Tensor | None = None,
        tgt_key_padding_mask: torch.Tensor | None = None,
        memory_key_padding_mask: torch.Tensor | None = None,
        src_mask: torch.Tensor | None = None,
        tgt_is_causal: bool = True,
    ) -> torch.Tensor:
        """``src: (B, S, D)``, ``tgt: (B, T, D)`` → ``(B, T, D)``; masks boolean, True = may attend, each checked
        under its own name here (``nn.Transformer``'s)."""
        self.encoder.check_inputs(src, None)
        b, s, t = src.shape[0], src.shape[1], tgt.shape[1]
        heads = self.encoder.heads
        mask = None if src_mask is None else as_attention_mask(src_mask, b, heads, s, s, name="src_mask")
        padding = key_padding("src_key_padding_mask", src_key_padding_mask, b, s)
        memory, _ = self.encoder(src, ctx=self.encoder.attention_context(b, s, src.device, padding=padding, mask=mask))
        ctx = self.decoder.attention_context(
            b,
            t,
            tgt.device,
            padding=key_padding("tgt_key_padding_mask", tgt_key_padding_mask, b, t),
            memory_len=s,
            memory_padding=key_padding("memory_key_padding_mask", memory_key_padding_mask, b, s),
            is_causal=tgt_is_causal,
        )
        out: torch.Tensor
        out, _ = self.decoder(tgt, memory, ctx)
        return out


class Seq2Seq(GenerationMethods, nn.Module):
    is_encoder_decoder = True

    def __init__(
        self,
        *,
        encoder: Encoder,
        decoder: Decoder,
        lm_head: nn.Linear,
        decoder_start_token_id: int = 0,
        output_scale: float = 1.0,
    ) -> None:
        super().__init__()
        self.encoder, self.decoder, self.lm_head = encoder, decoder, lm_head
        self.decoder_start_token_id = decoder_start_token_id
        self.output_scale = output_scale

    def new_caches(self, capacity: int | None = None) -> list[Any]:
        return self.decoder.stack.new_caches(capacity)

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        *,
        decoder_input_ids: torch.Tensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        encoder_outputs: EncoderOutput | None = None,
        kv_caches: list[Any] | None = None,
        use_cache: bool = False,
        past_key_values: Any = None,
        cache: Any = None,
        logits_to_keep: int | torch.Tensor = 0,
        **flags: Unpack[OutputFlags],
    ) -> Seq2SeqOutput | tuple[Any, ...]:
        """HF's ``past_key_values`` / ``cache`` / ``use_cache`` / ``output_hidden_states`` / ``return_dict`` work
        as on ``DecoderLM`` (a cache holds a ``(self, cross)`` pair per decoder layer), and ``logits_to_keep``: the
        head runs on the decoder positions kept only (``models.common.keep_positions``; 0, the default: all)."""
        output_attentions, output_hidden_states, return_dict = output_flags(self, flags)
        if labels is not None and not (isinstance(logits_to_keep, int) and logits_to_keep == 0):
            raise ValueError("labels need the logits of every position: give logits_to_keep=0 (the default)")
        if encoder_outputs is None:
            if input_ids is None:
                raise ValueError("input_ids (B, S) are required unless encoder_outputs are given")
            encoder_outputs = self.encoder(
                input_ids,
                attention_mask,
                output_attentions=output_attentions,
                output_hidden_states=output_hidden_states,
            )
        elif isinstance(encoder_outputs, (tuple, list)):  # HF accepts (last_hidden_state, ...) tuples
            encoder_outputs = EncoderOutput(last_hidden_state=encoder_outputs[0])
        if decoder_input_ids is None:
            if labels is None:
                raise ValueError("give decoder_input_ids (B, T) or labels (B, T) to derive them by shifting right")
            decoder_input_ids = shift_right(labels, self.decoder_start_token_id)
        ids_shape(decoder_input_ids, "decoder_input_ids")
        if cache is not None:
            if past_key_values is not None:
                raise ValueError("give past_key_values or cache, not both (transformers 5 renamed one to the other)")
            past_key_values = cache
        kv_caches, foreign = open_cache(self, past_key_values, kv_caches, use_cache, decoder_attention_mask)
        b, t = decoder_input_ids.shape
        memory = cast(torch.Tensor, encoder_outputs.last_hidden_state)
        seen = self.decoder.stack.seen(kv_caches, t)
        decoder_attention_mask = hf_padding("decoder_attention_mask", decoder_attention_mask, b, seen + t)
        attention_mask = hf_padding("attention_mask", attention_mask, b, memory.shape[1])
        hidden_list: list[torch.Tensor] | None = [] if output_hidden_states else None
        hidden, weights = self.decoder(
            decoder_input_ids,
            encoder_outputs.last_hidden_state,
            attention_mask=decoder_attention_mask,
            memory_mask=attention_mask,
            kv_caches=kv_caches,
            output_attentions=output_attentions,
            hidden_states=hidden_list,
        )
        kept = keep_positions(hidden, logits_to_keep)  # (B, T, D), or the positions kept
        logits = self.lm_head(kept * self.output_scale if self.output_scale != 1.0 else kept)  # (B, T, V)
        loss = None
        if labels is not None:
            if labels.shape != logits.shape[:2]:
                raise ValueError(f"labels must have shape (B, T)={tuple(logits.shape[:2])}, got {tuple(labels.shape)}")
            loss = F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(), ignore_index=-100)  # (B*T, V)
        out = Seq2SeqOutput(
            logits=logits,
            loss=loss,
            encoder_last_hidden_state=encoder_outputs.last_hidden_state,
            past_key_values=close_cache(kv_caches, foreign, decoder_input_ids.shape[1]),
            encoder_attentions=encoder_outputs.attentions,
            encoder_hidden_states=encoder_outputs.hidden_states,
            decoder_hidden_states=None if hidden_list is None else tuple(hidden_list),
            decoder_attentions=None if weights is None else tuple(w[0] for w in weights),
            cross_attentions=None if weights is None else tuple(w[1] for w in weights),
        )
        return out if return_dict else out.to_tuple()
