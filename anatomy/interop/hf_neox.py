"""GPT-NeoX (EleutherAI 2022; Pythia): Pre-LN with biases, RoPE on part of each head, a parallel residual and an
untied output matrix.

* partial rotary: ``rotary_pct`` (transformers 5: ``rope_parameters.partial_rotary_factor``, default 0.25) of each
  head's dims rotate, in the ``"half"`` layout over those dims: ``rope_fraction``;
* ``use_parallel_residual`` (default True): ``x + attn(ln_1(x)) + mlp(ln_2(x))``: ``parallel_residual``;
* ``query_key_value`` is fused with the rows *per head* ``[q_h | k_h | v_h]``; our ``qkv_proj`` stacks
  ``[q | k | v]``: the rows are regrouped (op ``"neox_qkv"``), the same way for the weight and the bias;
* ``embed_out`` is the output matrix (``tie_word_embeddings`` False by default); transformers 5 calls it
  ``lm_head`` and renames older checkpoints' key on loading, as ``Family.renames`` does here."""

from __future__ import annotations

from typing import Any

from anatomy.config import ModelConfig
from anatomy.interop import hf_common as hc


def neox_config(c: dict[str, Any], arch: str) -> ModelConfig:
    vocab = hc._get(c, "vocab_size")
    if c.get("attention_bias", True) is False:
        raise hc._refuse(arch, "attention_bias=False (the MLP keeps its bias; anatomy's one bias flag covers both)")
    if c.get("add_cross_attention"):
        raise hc._refuse(arch, "add_cross_attention=True")
    return ModelConfig(
        architecture="decoder_lm",
        vocab_size=vocab,
        **hc.read_sizes(c, 2048),
        positional="rope",
        rope_layout="half",
        norm="layernorm",
        norm_position="pre",
        activation=hc._activation(arch, c.get("hidden_act", "gelu")),
        dropout=float(c.get("hidden_dropout", 0.0)),
        attention_dropout=float(c.get("attention_dropout", 0.0)),
        bias=True,
        tie_embeddings=c.get("tie_word_embeddings", False),
        fused_qkv=True,
        norm_eps=c.get("layer_norm_eps", 1e-5),
        pad_token_id=hc._pad(c, vocab),
        parallel_residual=bool(c.get("use_parallel_residual", True)),
        **hc.read_rope(c, arch, fraction=0.25, partial=True),
    )


def _neox_layer(h: str, o: str) -> list[hc.Entry]:
    return [
        *hc._norm(f"{h}.input_layernorm", f"{o}.attn_add_norm.norm", True),
        *hc._norm(f"{h}.post_attention_layernorm", f"{o}.ffn_add_norm.norm", True),
        hc._e(f"{h}.attention.query_key_value.weight", f"{o}.attn.qkv_proj.weight", "neox_qkv"),
        hc._e(f"{h}.attention.query_key_value.bias", f"{o}.attn.qkv_proj.bias", "neox_qkv"),
        *hc._linear(f"{h}.attention.dense", f"{o}.attn.o_proj", True),
        *hc._linear(f"{h}.mlp.dense_h_to_4h", f"{o}.ffn.up_proj", True),
        *hc._linear(f"{h}.mlp.dense_4h_to_h", f"{o}.ffn.down_proj", True),
    ]


def neox_table(cfg: ModelConfig, arch: str) -> list[hc.Entry]:
    # a tied head is "lm_head.weight": transformers 5's name of embed_out (Family.renames)
    return hc.decoder_table(
        cfg, "gpt_neox.embed_in.weight", "gpt_neox.layers", "gpt_neox.final_layer_norm", True, _neox_layer
    )


def neox_write(cfg: ModelConfig, arch: str) -> dict[str, Any]:
    return dict(
        **hc.hf_sizes(cfg),
        hidden_act=hc._ACT_TO_HF[cfg.activation],
        layer_norm_eps=cfg.norm_eps,
        hidden_dropout=cfg.dropout,
        attention_dropout=cfg.attention_dropout,
        attention_bias=True,
        use_parallel_residual=cfg.parallel_residual,
        tie_word_embeddings=cfg.tie_embeddings,
        rope_parameters=hc.write_rope(cfg) | {"partial_rotary_factor": cfg.rope_fraction},
    )
