"""BERT (Google 2018): a Post-LN encoder with biases, learned positions and token types, and a LayerNorm on the
embeddings; ``BertForSequenceClassification`` adds the pooler and a classifier under the ``bert.`` prefix.

* q, k and v are three projections (``attention.self.query`` / ``key`` / ``value``);
* ``BertModel``'s pooler (``add_pooling_layer=True``, HF's default) is our encoder's ``pooler_output`` when the
  config keeps one (``encoder_pooler``), else read past."""

from __future__ import annotations

from typing import Any

from anatomy.config import ModelConfig
from anatomy.interop import hf_common as hc

CLASSIFIER = "BertForSequenceClassification"


def bert_config(c: dict[str, Any], arch: str) -> ModelConfig:
    if c.get("position_embedding_type", "absolute") != "absolute":
        raise hc._refuse(arch, f"position_embedding_type={c['position_embedding_type']!r}")
    if c.get("is_decoder") or c.get("add_cross_attention"):
        raise hc._refuse(arch, "a BERT decoder (is_decoder / add_cross_attention)")
    vocab = hc._get(c, "vocab_size")
    labels = c.get("num_labels") or len(c.get("id2label") or {}) or 2
    return ModelConfig(
        architecture="classifier" if arch == CLASSIFIER else "encoder",
        vocab_size=vocab,
        **hc.read_sizes(c, 512),
        positional="learned",
        norm="layernorm",
        norm_position="post",
        activation=hc._activation(arch, c.get("hidden_act", "gelu")),
        dropout=c.get("hidden_dropout_prob", 0.1),
        attention_dropout=c.get("attention_probs_dropout_prob", 0.1),
        bias=True,
        embedding_norm=True,
        type_vocab_size=c.get("type_vocab_size", 2),
        norm_eps=c.get("layer_norm_eps", 1e-12),
        pooler=arch == CLASSIFIER,
        num_labels=labels,
        pad_token_id=hc._pad(c, vocab),
    )


def bert_table(cfg: ModelConfig, arch: str) -> list[hc.Entry]:
    cls = arch == CLASSIFIER
    b, e = ("bert.", "encoder.") if cls else ("", "")
    rows = [
        hc._e(f"{b}embeddings.word_embeddings.weight", f"{e}embeddings.embed_tokens.weight"),
        hc._e(f"{b}embeddings.position_embeddings.weight", f"{e}embeddings.positional.weight"),
        hc._e(f"{b}embeddings.token_type_embeddings.weight", f"{e}embeddings.token_types.weight"),
        *hc._norm(f"{b}embeddings.LayerNorm", f"{e}embeddings.norm", True),
    ]
    for i in range(cfg.n_layers):
        h, o = f"{b}encoder.layer.{i}", f"{e}stack.blocks.{i}"
        rows += hc._linear(f"{h}.attention.self.query", f"{o}.attn.q_proj", True)
        rows += hc._linear(f"{h}.attention.self.key", f"{o}.attn.k_proj", True)
        rows += hc._linear(f"{h}.attention.self.value", f"{o}.attn.v_proj", True)
        rows += hc._linear(f"{h}.attention.output.dense", f"{o}.attn.o_proj", True)
        rows += hc._norm(f"{h}.attention.output.LayerNorm", f"{o}.attn_add_norm.norm", True)  # Post-LN
        rows += hc._linear(f"{h}.intermediate.dense", f"{o}.ffn.up_proj", True)
        rows += hc._linear(f"{h}.output.dense", f"{o}.ffn.down_proj", True)
        rows += hc._norm(f"{h}.output.LayerNorm", f"{o}.ffn_add_norm.norm", True)
    if cls:
        return rows + hc._linear("bert.pooler.dense", "pooler", True) + hc._linear("classifier", "classifier", True)
    if cfg.encoder_pooler:  # BertModel's pooler (add_pooling_layer=True, HF's default): our Encoder's pooler_output
        return rows + hc._linear("pooler.dense", "pooler", True)
    return rows + hc._linear("pooler.dense", "-", True, "drop")  # a headless checkpoint's pooler, read past


def bert_write(cfg: ModelConfig, arch: str) -> dict[str, Any]:
    out = dict(
        **hc.hf_sizes(cfg),
        hidden_act=hc._ACT_TO_HF[cfg.activation],
        type_vocab_size=cfg.type_vocab_size,
        layer_norm_eps=cfg.norm_eps,
        hidden_dropout_prob=cfg.dropout,
        attention_probs_dropout_prob=cfg.attention_dropout,
        pad_token_id=cfg.pad_token_id,
    )
    if arch == CLASSIFIER:
        out["num_labels"] = cfg.num_labels
    return out
