"""GPT-2 (OpenAI 2019): Pre-LN with biases, learned positions, a tied head and ``Conv1D`` projections.

* ``Conv1D`` stores its weight as ``(in, out)``, the transpose of ``nn.Linear``'s: every projection is transposed
  (op ``"conv1d"``);
* ``c_attn`` is the fused ``[q | k | v]`` projection, the same row order as our ``qkv_proj``;
* ``scale_attn_weights=False`` leaves the scores unscaled: ``attn_scale=1.0``."""

from __future__ import annotations

from typing import Any

from anatomy.config import ModelConfig
from anatomy.interop import hf_common as hc


def gpt2_config(c: dict[str, Any], arch: str) -> ModelConfig:
    if c.get("scale_attn_by_inverse_layer_idx"):
        raise hc._refuse(arch, "scale_attn_by_inverse_layer_idx=True")
    if c.get("add_cross_attention"):
        raise hc._refuse(arch, "add_cross_attention=True")
    d, vocab = hc._get(c, "n_embd"), hc._get(c, "vocab_size")
    return ModelConfig(
        architecture="decoder_lm",
        vocab_size=vocab,
        d_model=d,
        n_heads=hc._get(c, "n_head"),
        n_layers=hc._get(c, "n_layer"),
        d_ff=c.get("n_inner") or 4 * d,
        max_seq_len=c.get("n_positions", 1024),
        positional="learned",
        norm="layernorm",
        norm_position="pre",
        activation=hc._activation(arch, c.get("activation_function", "gelu_new")),
        dropout=c.get("resid_pdrop", 0.1),
        attention_dropout=c.get("attn_pdrop", 0.1),
        bias=True,
        tie_embeddings=c.get("tie_word_embeddings", True),
        fused_qkv=True,
        norm_eps=c.get("layer_norm_epsilon", 1e-5),
        attn_scale=None if c.get("scale_attn_weights", True) else 1.0,
        pad_token_id=hc._pad(c, vocab),
    )


def _gpt2_layer(h: str, o: str) -> list[hc.Entry]:
    return [
        *hc._norm(f"{h}.ln_1", f"{o}.attn_add_norm.norm", True),
        *hc._linear(f"{h}.attn.c_attn", f"{o}.attn.qkv_proj", True, "conv1d"),  # (D, 3D) → (3D, D)
        *hc._linear(f"{h}.attn.c_proj", f"{o}.attn.o_proj", True, "conv1d"),  # (D, D) → (D, D)^T
        *hc._norm(f"{h}.ln_2", f"{o}.ffn_add_norm.norm", True),
        *hc._linear(f"{h}.mlp.c_fc", f"{o}.ffn.up_proj", True, "conv1d"),  # (D, F) → (F, D)
        *hc._linear(f"{h}.mlp.c_proj", f"{o}.ffn.down_proj", True, "conv1d"),  # (F, D) → (D, F)
    ]


def gpt2_table(cfg: ModelConfig, arch: str) -> list[hc.Entry]:
    positions = hc._e("transformer.wpe.weight", "embeddings.positional.weight")
    return hc.decoder_table(
        cfg, "transformer.wte.weight", "transformer.h", "transformer.ln_f", True, _gpt2_layer, (positions,)
    )


def gpt2_write(cfg: ModelConfig, arch: str) -> dict[str, Any]:
    return dict(
        n_embd=cfg.d_model,
        n_head=cfg.n_heads,
        n_layer=cfg.n_layers,
        n_inner=hc.ffn_width(cfg),
        n_positions=cfg.max_seq_len,
        activation_function=hc._ACT_TO_HF[cfg.activation],
        layer_norm_epsilon=cfg.norm_eps,
        resid_pdrop=cfg.dropout,
        embd_pdrop=cfg.dropout,
        attn_pdrop=cfg.attention_dropout,
        scale_attn_weights=cfg.attn_scale is None,
        tie_word_embeddings=cfg.tie_embeddings,
    )
