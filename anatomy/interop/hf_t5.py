"""T5 (Google 2019): an encoder-decoder with Pre-LN RMSNorm (no bias anywhere), unscaled scores and a relative
position bias shared by each stack's layers.

* each stack's block 0 owns the one relative-bias table ``(num_buckets, H)``: our stack's ``position_bias``;
* ``feed_forward_proj`` names the FFN: ``"gated-gelu"`` (T5 v1.1, flan-t5) and ``"gated-silu"`` have two input
  matrices (``wi_0`` the gate, ``wi_1`` the linear half);
* v1.0 ties the head to the embedding and scales the decoder output by ``d_model ** -0.5``: ``output_scale``;
  v1.1 does neither;
* the decoder starts from ``decoder_start_token_id``, our ``pad_token_id``."""

from __future__ import annotations

import math
from typing import Any

from anatomy.components.ffn import GATED
from anatomy.config import ModelConfig
from anatomy.interop.hf_common import Entry, _e, _get, _lm_head, _pad, _refuse, ffn_width, tied_head

# feed_forward_proj → our activation. HF runs "gated-gelu" (T5 v1.1, flan-t5) with dense_act_fn="gelu_new", the
# tanh GELU, as act(wi_0(x)) * wi_1(x): our "geglu_tanh"; "gated-silu" is silu(wi_0(x)) * wi_1(x): "swiglu".
T5_FFN = {"relu": "relu", "gelu": "gelu", "gated-silu": "swiglu", "gated-gelu": "geglu_tanh"}


def t5_config(c: dict[str, Any], arch: str) -> ModelConfig:
    d, h, vocab = _get(c, "d_model"), _get(c, "num_heads"), _get(c, "vocab_size")
    d_kv = c.get("d_kv", 64)
    ffn = c.get("feed_forward_proj", "relu")
    if ffn not in T5_FFN:
        raise _refuse(arch, f"feed_forward_proj={ffn!r} (supported: {', '.join(T5_FFN)})")
    tied = c.get("tie_word_embeddings", True) is not False
    scaled = c.get("scale_decoder_outputs", tied)  # v1.0: tied head and hidden * d_model**-0.5; v1.1: neither
    pad = _pad(c, vocab)
    pad = 0 if pad is None else pad  # T5Config's default, and T5's decoder start
    start = c.get("decoder_start_token_id")
    rate = c.get("dropout_rate", 0.1)
    return ModelConfig(
        architecture="seq2seq",
        vocab_size=vocab,
        d_model=d,
        n_heads=h,
        n_layers=_get(c, "num_layers"),
        head_dim=None if d_kv * h == d else d_kv,  # T5 v1.1 small: 6 heads of 64 on d_model 512
        n_decoder_layers=c.get("num_decoder_layers") or _get(c, "num_layers"),
        d_ff=_get(c, "d_ff"),
        positional="t5",
        t5_num_buckets=c.get("relative_attention_num_buckets", 32),
        t5_max_distance=c.get("relative_attention_max_distance", 128),
        norm="rmsnorm",
        norm_position="pre",
        activation=T5_FFN[ffn],
        bias=False,
        attn_scale=1.0,
        dropout=rate,
        attention_dropout=rate,
        tie_embeddings=tied,
        norm_eps=c.get("layer_norm_epsilon", 1e-6),
        output_scale=d**-0.5 if scaled else 1.0,
        pad_token_id=start if isinstance(start, int) and 0 <= start < vocab else pad,  # our decoder start id
    )


def t5_table(cfg: ModelConfig, arch: str) -> list[Entry]:
    tied = tied_head(cfg)
    rows = [
        _e(
            ("shared.weight", "encoder.embed_tokens.weight", "decoder.embed_tokens.weight", *tied),
            ("encoder.embeddings.embed_tokens.weight", "decoder.embeddings.embed_tokens.weight", *tied),
        )
    ]
    gated = cfg.activation in GATED  # DenseGatedActDense: wi_0 is the gate, wi_1 the linear half
    for side, n, names in (
        ("encoder", cfg.n_layers, ("SelfAttention", "DenseReluDense")),
        ("decoder", cfg.decoder_layers, ("SelfAttention", "EncDecAttention", "DenseReluDense")),
    ):
        # block 0 owns the stack's one relative-bias table (num_buckets, H)
        rows.append(
            _e(
                f"{side}.block.0.layer.0.SelfAttention.relative_attention_bias.weight",
                f"{side}.stack.position_bias.relative_attention_bias.weight",
            )
        )
        for i in range(n):
            h, o = f"{side}.block.{i}.layer", f"{side}.stack.blocks.{i}"
            ours = {
                "SelfAttention": ("attn", "attn_add_norm"),
                "EncDecAttention": ("cross_attn", "cross_add_norm"),
                "DenseReluDense": ("ffn", "ffn_add_norm"),
            }
            for j, name in enumerate(names):
                module, add_norm = ours[name]
                if name == "DenseReluDense":
                    ffn = (("wi_0", "gate_proj"), ("wi_1", "up_proj")) if gated else (("wi", "up_proj"),)
                    for hf_name, our_name in (*ffn, ("wo", "down_proj")):
                        rows.append(_e(f"{h}.{j}.{name}.{hf_name}.weight", f"{o}.{module}.{our_name}.weight"))
                else:
                    for p in "qkvo":
                        rows.append(_e(f"{h}.{j}.{name}.{p}.weight", f"{o}.{module}.{p}_proj.weight"))
                rows.append(_e(f"{h}.{j}.layer_norm.weight", f"{o}.{add_norm}.norm.weight"))
        rows.append(_e(f"{side}.final_layer_norm.weight", f"{side}.stack.final_norm.weight"))
    return rows + _lm_head(tied)


def t5_write(cfg: ModelConfig, arch: str) -> dict[str, Any]:
    return dict(
        d_model=cfg.d_model,
        d_kv=cfg.dh,
        num_heads=cfg.n_heads,
        d_ff=ffn_width(cfg),
        num_layers=cfg.n_layers,
        num_decoder_layers=cfg.decoder_layers,
        relative_attention_num_buckets=cfg.t5_num_buckets,
        relative_attention_max_distance=cfg.t5_max_distance,
        dropout_rate=cfg.dropout,
        layer_norm_epsilon=cfg.norm_eps,
        feed_forward_proj={v: k for k, v in T5_FFN.items()}[cfg.activation],
        # transformers reads this flag as "scale the decoder output" (and, before v5, as "tie the head"); to_hf
        # checks afterwards that the head it built is the one we wrote
        tie_word_embeddings=not math.isclose(cfg.output_scale, 1.0),
        pad_token_id=cfg.pad_token_id,
        decoder_start_token_id=cfg.pad_token_id,
    )
