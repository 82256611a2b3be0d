"""Gemma and Gemma 2 (Google DeepMind 2024): the Llama design with four departures, each one of our named options.

* RMSNorm scales by ``1 + weight`` (weights stored around 0): ``norm_weight_offset=1.0``;
* the token embeddings are multiplied by ``sqrt(hidden_size)`` (the lm_head, tied, is not): ``scale_embeddings``;
* the gated FFN uses the tanh GELU (``gelu_pytorch_tanh``; Gemma's legacy ``"gelu"`` means the same, as
  transformers reads it): ``activation="geglu_tanh"``;
* heads have their own width (``head_dim`` 256 on ``hidden_size`` 2048/3072): ``head_dim``.

Gemma 2 adds sandwich norms (``input_layernorm`` / ``post_attention_layernorm`` around attention,
``pre_feedforward_layernorm`` / ``post_feedforward_layernorm`` around the FFN: ``norm_position="sandwich"``),
scores scaled by ``query_pre_attn_scalar ** -0.5`` (``attn_scale``), soft-capped attention logits
(``attn_softcap``) and final logits (``final_logit_softcap``), and a sliding window on alternate layers
(``layer_types``; by default layers 0, 2, 4, ... slide: ``window_pattern="LG"``)."""

from __future__ import annotations

import math
from typing import Any

from anatomy.config import ModelConfig
from anatomy.interop import hf_common as hc
from anatomy.interop.hf_llama import llama_shape, llama_sizes, window_layers

GEMMA2 = "Gemma2ForCausalLM"
_TANH_GELU = ("gelu_pytorch_tanh", "gelu")  # "gelu" is Gemma's legacy spelling of the tanh GELU (transformers)


def gemma_config(c: dict[str, Any], arch: str) -> ModelConfig:
    d, h, vocab, n = (
        hc._get(c, "hidden_size"),
        hc._get(c, "num_attention_heads"),
        hc._get(c, "vocab_size"),
        hc._get(c, "num_hidden_layers"),
    )
    act = c.get("hidden_activation") or c.get("hidden_act") or "gelu_pytorch_tanh"
    if act not in _TANH_GELU:
        raise hc._refuse(arch, f"hidden_activation={act!r} (Gemma's gated FFN: gelu_pytorch_tanh)")
    if c.get("attention_bias"):
        raise hc._refuse(arch, "attention_bias=True (Gemma's MLP has no bias; anatomy's one bias flag covers both)")
    if c.get("use_bidirectional_attention"):
        raise hc._refuse(arch, "use_bidirectional_attention=True")
    head_dim = c.get("head_dim", 256)
    extra: dict[str, Any] = dict(norm_position="pre")
    if arch == GEMMA2:
        window, pattern = window_layers(
            c, arch, n, ["sliding_attention" if (i + 1) % 2 else "full_attention" for i in range(n)]
        )
        scalar = c.get("query_pre_attn_scalar", head_dim)
        extra = dict(
            norm_position="sandwich",
            attn_scale=None if scalar == head_dim else float(scalar) ** -0.5,
            attn_softcap=c.get("attn_logit_softcapping"),
            final_logit_softcap=c.get("final_logit_softcapping"),
            sliding_window=window,
            window_pattern=pattern,
        )
    return ModelConfig(
        **llama_shape(c, vocab, 8192),
        head_dim=None if head_dim * h == d else head_dim,
        positional="rope",
        rope_layout="half",
        norm="rmsnorm",
        activation="geglu_tanh",
        dropout=0.0,
        attention_dropout=float(c.get("attention_dropout") or 0.0),
        bias=False,
        tie_embeddings=c.get("tie_word_embeddings", True),
        norm_eps=c.get("rms_norm_eps", 1e-6),
        pad_token_id=hc._pad(c, vocab),
        scale_embeddings=True,
        norm_weight_offset=1.0,
        **hc.read_rope(c, arch),
        **extra,
    )


def _gemma_layer(h: str, o: str, sandwich: bool) -> list[hc.Entry]:
    if sandwich:  # x + post(f(pre(x))) around each sub-layer
        rows = [
            *hc._norm(f"{h}.input_layernorm", f"{o}.attn_add_norm.pre_norm", False),
            *hc._norm(f"{h}.post_attention_layernorm", f"{o}.attn_add_norm.post_norm", False),
            *hc._norm(f"{h}.pre_feedforward_layernorm", f"{o}.ffn_add_norm.pre_norm", False),
            *hc._norm(f"{h}.post_feedforward_layernorm", f"{o}.ffn_add_norm.post_norm", False),
        ]
    else:
        rows = [
            *hc._norm(f"{h}.input_layernorm", f"{o}.attn_add_norm.norm", False),
            *hc._norm(f"{h}.post_attention_layernorm", f"{o}.ffn_add_norm.norm", False),
        ]
    for p in ("q_proj", "k_proj", "v_proj", "o_proj"):
        rows += hc._linear(f"{h}.self_attn.{p}", f"{o}.attn.{p}", False)
    for p in ("gate_proj", "up_proj", "down_proj"):  # down(gelu_tanh(gate(x)) * up(x))
        rows += hc._linear(f"{h}.mlp.{p}", f"{o}.ffn.{p}", False)
    return rows


def gemma_table(cfg: ModelConfig, arch: str) -> list[hc.Entry]:
    sandwich = arch == GEMMA2
    return hc.decoder_table(
        cfg, "model.embed_tokens.weight", "model.layers", "model.norm", False, lambda h, o: _gemma_layer(h, o, sandwich)
    )


def gemma_write(cfg: ModelConfig, arch: str) -> dict[str, Any]:
    out = dict(
        **llama_sizes(cfg),
        hidden_activation="gelu_pytorch_tanh",
        attention_bias=False,
        attention_dropout=cfg.attention_dropout,
        tie_word_embeddings=cfg.tie_embeddings,
        rope_parameters=hc.write_rope(cfg),
        pad_token_id=cfg.pad_token_id,
    )
    if arch != GEMMA2:
        return out | {"hidden_act": "gelu_pytorch_tanh"}
    types = ["sliding_attention" if cfg.layer_window(i) else "full_attention" for i in range(cfg.n_layers)]
    return out | dict(
        query_pre_attn_scalar=_scalar(cfg),
        attn_logit_softcapping=cfg.attn_softcap,
        final_logit_softcapping=cfg.final_logit_softcap,
        # transformers builds the sliding mask whatever the layer types say: some window, used by no layer if none
        sliding_window=cfg.sliding_window or cfg.max_seq_len,
        layer_types=types,
    )


def _scalar(cfg: ModelConfig) -> int | float:
    """``query_pre_attn_scalar`` with ``attn_scale = scalar ** -0.5``: an integer when it is one (as Gemma 2 writes)."""
    if cfg.attn_scale is None:
        return cfg.dh
    scalar = cfg.attn_scale**-2
    return round(scalar) if math.isclose(scalar, round(scalar), rel_tol=1e-12) else scalar
