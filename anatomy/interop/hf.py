"""Hugging Face ``transformers`` ⇄ anatomy: one explicit key table per architecture.

    ours = from_hf(hf_model)          hf_model = to_hf(ours)          ours = load_pretrained(hf_directory)

Supported: ``GPT2LMHeadModel``, ``BertModel``, ``BertForSequenceClassification``, ``LlamaForCausalLM``,
``T5ForConditionalGeneration`` (both directions). ``transformers`` is an optional dependency (``[hf]``): reading an
HF *directory* needs only its ``config.json`` and safetensors weights; only ``from_hf``/``to_hf`` on live HF objects
import it.

Each architecture has three small functions:

* a config reader: HF ``config.json`` dict → ``ModelConfig`` (every field that matters is read, everything we
  cannot express is refused by name, never silently dropped);
* a key table: one ``Entry(hf keys, our keys, op)`` per tensor. The first key of a side is the stored one, the
  others are tied names of the same tensor (``lm_head.weight`` tied to the token embedding). Conversion asserts
  that every checkpoint key is used once (or is a known buffer), that every key of our model is filled, and that
  every tensor has the shape the config implies — a mismatch names the key and both shapes;
* a config writer: ``ModelConfig`` → HF config kwargs (``to_hf``).

``op`` is ``"copy"``, or ``"conv1d"`` for GPT-2's ``Conv1D`` layers, which store ``W`` as ``(in, out)`` and compute
``x @ W + b``; ``nn.Linear`` stores ``(out, in)`` and computes ``x @ W.T + b``: the weight is transposed, the bias is
copied. ``"drop"`` marks a checkpoint tensor our model has no place for (BertModel's pooler: our Encoder returns
``last_hidden_state``); it is read past on purpose, never by accident.

Layouts that need no permutation, and why:
* GPT-2's fused ``c_attn`` output columns are ``[q | k | v]``, heads contiguous inside each: exactly the row order of
  our ``qkv_proj`` (``fused_qkv=True``) after the transpose.
* HF Llama rotates q/k in the ``"half"`` layout, our default; ``from_hf(model, rope_layout="interleaved")`` and
  ``to_hf`` of an interleaved model permute q/k rows (``interop.rope_layout``).
* T5 keeps one relative-bias table per stack in block 0 (``relative_attention_bias``, ``(num_buckets, H)``): our
  ``stack.position_bias``; it does not scale scores (``attn_scale=1.0``); its norm is RMSNorm without bias; v1.0's
  tied head rescales the decoder output by ``d_model**-0.5`` (our ``output_scale``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from anatomy.components.ffn import GATED, default_d_ff
from anatomy.config import ModelConfig
from anatomy.interop.rope_layout import convert_state_dict as convert_rope_state
from anatomy.interop.safetensors_io import CheckpointError

SUPPORTED = ("GPT2LMHeadModel", "BertModel", "BertForSequenceClassification", "LlamaForCausalLM",
             "MistralForCausalLM", "Qwen3ForCausalLM", "T5ForConditionalGeneration")

_REQUIRED = object()


@dataclass(frozen=True)
class Entry:
    hf: tuple[str, ...]  # checkpoint key, then tied aliases
    ours: tuple[str, ...]  # our state-dict key, then tied aliases
    op: str = "copy"  # "copy" | "conv1d" (transpose the weight) | "drop" (read past on purpose)


def _e(hf: str | tuple[str, ...], ours: str | tuple[str, ...], op: str = "copy") -> Entry:
    return Entry((hf,) if isinstance(hf, str) else tuple(hf), (ours,) if isinstance(ours, str) else tuple(ours), op)


def _linear(hf: str, ours: str, bias: bool, op: str = "copy") -> list[Entry]:
    rows = [_e(f"{hf}.weight", f"{ours}.weight", op)]
    return rows + ([_e(f"{hf}.bias", f"{ours}.bias", "drop" if op == "drop" else "copy")] if bias else [])


def _norm(hf: str, ours: str, bias: bool) -> list[Entry]:
    return _linear(hf, ours, bias)


def _get(c: dict, key: str, default: Any = _REQUIRED) -> Any:
    value = c.get(key, default)
    if value is _REQUIRED:
        raise CheckpointError(f"Hugging Face config lacks the required field {key!r}")
    return value


def _pad(c: dict, vocab: int) -> int:
    pad = c.get("pad_token_id")
    return pad if isinstance(pad, int) and 0 <= pad < vocab else 0


def _refuse(arch: str, what: str) -> CheckpointError:
    return CheckpointError(f"{arch}: {what} is not supported by anatomy's converter")


_ACT_FROM_HF = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu", "relu": "relu",
                "silu": "silu", "swish": "silu"}
_ACT_TO_HF = {"gelu_tanh": "gelu_new", "gelu": "gelu", "relu": "relu", "silu": "silu"}


def _activation(arch: str, name: str) -> str:
    if name not in _ACT_FROM_HF:
        raise _refuse(arch, f"activation {name!r} (supported: {', '.join(sorted(_ACT_FROM_HF))})")
    return _ACT_FROM_HF[name]


# ================================================================================================ GPT-2

def _gpt2_config(c: dict, arch: str) -> ModelConfig:
    if c.get("scale_attn_by_inverse_layer_idx"):
        raise _refuse(arch, "scale_attn_by_inverse_layer_idx=True")
    if c.get("add_cross_attention"):
        raise _refuse(arch, "add_cross_attention=True")
    d, vocab = _get(c, "n_embd"), _get(c, "vocab_size")
    return ModelConfig(
        architecture="decoder_lm", vocab_size=vocab, d_model=d, n_heads=_get(c, "n_head"),
        n_layers=_get(c, "n_layer"), d_ff=c.get("n_inner") or 4 * d, max_seq_len=c.get("n_positions", 1024),
        positional="learned", norm="layernorm", norm_position="pre",
        activation=_activation(arch, c.get("activation_function", "gelu_new")),
        dropout=c.get("resid_pdrop", 0.1), attention_dropout=c.get("attn_pdrop", 0.1), bias=True,
        tie_embeddings=c.get("tie_word_embeddings", True), fused_qkv=True,
        norm_eps=c.get("layer_norm_epsilon", 1e-5), attn_scale=None if c.get("scale_attn_weights", True) else 1.0,
        pad_token_id=_pad(c, vocab),
    )


def _gpt2_table(cfg: ModelConfig, arch: str) -> list[Entry]:
    tied = ("lm_head.weight",) if cfg.tie_embeddings else ()
    rows = [_e(("transformer.wte.weight", *tied), ("embeddings.embed_tokens.weight", *tied)),
            _e("transformer.wpe.weight", "embeddings.positional.weight")]
    for i in range(cfg.n_layers):
        h, o = f"transformer.h.{i}", f"stack.blocks.{i}"
        rows += _norm(f"{h}.ln_1", f"{o}.attn_add_norm.norm", True)
        rows += _linear(f"{h}.attn.c_attn", f"{o}.attn.qkv_proj", True, "conv1d")  # (D, 3D) → (3D, D)
        rows += _linear(f"{h}.attn.c_proj", f"{o}.attn.o_proj", True, "conv1d")  # (D, D) → (D, D)^T
        rows += _norm(f"{h}.ln_2", f"{o}.ffn_add_norm.norm", True)
        rows += _linear(f"{h}.mlp.c_fc", f"{o}.ffn.up_proj", True, "conv1d")  # (D, F) → (F, D)
        rows += _linear(f"{h}.mlp.c_proj", f"{o}.ffn.down_proj", True, "conv1d")  # (F, D) → (D, F)
    rows += _norm("transformer.ln_f", "stack.final_norm", True)
    return rows + ([] if tied else [_e("lm_head.weight", "lm_head.weight")])


def _gpt2_write(cfg: ModelConfig, arch: str) -> dict:
    return dict(
        vocab_size=cfg.vocab_size, n_embd=cfg.d_model, n_head=cfg.n_heads, n_layer=cfg.n_layers,
        n_inner=cfg.d_ff or default_d_ff(cfg.d_model, cfg.activation), n_positions=cfg.max_seq_len,
        activation_function=_ACT_TO_HF[cfg.activation], layer_norm_epsilon=cfg.norm_eps,
        resid_pdrop=cfg.dropout, embd_pdrop=cfg.dropout, attn_pdrop=cfg.attention_dropout,
        scale_attn_weights=cfg.attn_scale is None, tie_word_embeddings=cfg.tie_embeddings,
    )


# ================================================================================================ BERT

def _bert_config(c: dict, arch: str) -> ModelConfig:
    if c.get("position_embedding_type", "absolute") != "absolute":
        raise _refuse(arch, f"position_embedding_type={c['position_embedding_type']!r}")
    if c.get("is_decoder") or c.get("add_cross_attention"):
        raise _refuse(arch, "a BERT decoder (is_decoder / add_cross_attention)")
    vocab = _get(c, "vocab_size")
    labels = c.get("num_labels") or len(c.get("id2label") or {}) or 2
    return ModelConfig(
        architecture="classifier" if arch == "BertForSequenceClassification" else "encoder",
        vocab_size=vocab, d_model=_get(c, "hidden_size"), n_heads=_get(c, "num_attention_heads"),
        n_layers=_get(c, "num_hidden_layers"), d_ff=_get(c, "intermediate_size"),
        max_seq_len=c.get("max_position_embeddings", 512), positional="learned", norm="layernorm",
        norm_position="post", activation=_activation(arch, c.get("hidden_act", "gelu")),
        dropout=c.get("hidden_dropout_prob", 0.1), attention_dropout=c.get("attention_probs_dropout_prob", 0.1),
        bias=True, embedding_norm=True, type_vocab_size=c.get("type_vocab_size", 2),
        norm_eps=c.get("layer_norm_eps", 1e-12), pooler=arch == "BertForSequenceClassification",
        num_labels=labels, pad_token_id=_pad(c, vocab),
    )


def _bert_table(cfg: ModelConfig, arch: str) -> list[Entry]:
    cls = arch == "BertForSequenceClassification"
    b, e = ("bert.", "encoder.") if cls else ("", "")
    rows = [_e(f"{b}embeddings.word_embeddings.weight", f"{e}embeddings.embed_tokens.weight"),
            _e(f"{b}embeddings.position_embeddings.weight", f"{e}embeddings.positional.weight"),
            _e(f"{b}embeddings.token_type_embeddings.weight", f"{e}embeddings.token_types.weight"),
            *_norm(f"{b}embeddings.LayerNorm", f"{e}embeddings.norm", True)]
    for i in range(cfg.n_layers):
        h, o = f"{b}encoder.layer.{i}", f"{e}stack.blocks.{i}"
        rows += _linear(f"{h}.attention.self.query", f"{o}.attn.q_proj", True)
        rows += _linear(f"{h}.attention.self.key", f"{o}.attn.k_proj", True)
        rows += _linear(f"{h}.attention.self.value", f"{o}.attn.v_proj", True)
        rows += _linear(f"{h}.attention.output.dense", f"{o}.attn.o_proj", True)
        rows += _norm(f"{h}.attention.output.LayerNorm", f"{o}.attn_add_norm.norm", True)  # Post-LN
        rows += _linear(f"{h}.intermediate.dense", f"{o}.ffn.up_proj", True)
        rows += _linear(f"{h}.output.dense", f"{o}.ffn.down_proj", True)
        rows += _norm(f"{h}.output.LayerNorm", f"{o}.ffn_add_norm.norm", True)
    if cls:
        return rows + _linear("bert.pooler.dense", "pooler", True) + _linear("classifier", "classifier", True)
    return rows + _linear("pooler.dense", "-", True, "drop")  # our Encoder stops at last_hidden_state


def _bert_write(cfg: ModelConfig, arch: str) -> dict:
    out = dict(
        vocab_size=cfg.vocab_size, hidden_size=cfg.d_model, num_attention_heads=cfg.n_heads,
        num_hidden_layers=cfg.n_layers, intermediate_size=cfg.d_ff or default_d_ff(cfg.d_model, cfg.activation),
        hidden_act=_ACT_TO_HF[cfg.activation], max_position_embeddings=cfg.max_seq_len,
        type_vocab_size=cfg.type_vocab_size, layer_norm_eps=cfg.norm_eps, hidden_dropout_prob=cfg.dropout,
        attention_probs_dropout_prob=cfg.attention_dropout, pad_token_id=cfg.pad_token_id,
    )
    if arch == "BertForSequenceClassification":
        out["num_labels"] = cfg.num_labels
    return out


# ================================================================================================ Llama

def _llama_config(c: dict, arch: str) -> ModelConfig:
    d, h, vocab = _get(c, "hidden_size"), _get(c, "num_attention_heads"), _get(c, "vocab_size")
    if c.get("hidden_act", "silu") != "silu":
        raise _refuse(arch, f"hidden_act={c['hidden_act']!r} (anatomy's Llama FFN is SwiGLU: silu)")
    if bool(c.get("attention_bias", False)) != bool(c.get("mlp_bias", False)):
        raise _refuse(arch, "attention_bias != mlp_bias (anatomy has one bias flag)")
    qwen3 = arch == "Qwen3ForCausalLM"
    if qwen3 and c.get("use_sliding_window", False):  # Qwen3 windows only the layers past max_window_layers
        raise _refuse(arch, "use_sliding_window=True (a window on some layers only; anatomy windows all or none)")
    window = c.get("sliding_window") if arch == "MistralForCausalLM" else None  # Mistral: every layer, or None
    rope = c.get("rope_parameters") or c.get("rope_scaling") or {}
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    if rope_type != "default":
        raise _refuse(arch, f"rope scaling {rope_type!r} (only plain RoPE)")
    return ModelConfig(
        architecture="decoder_lm", vocab_size=vocab, d_model=d, n_heads=h,
        n_kv_heads=c.get("num_key_value_heads") or h, n_layers=_get(c, "num_hidden_layers"),
        head_dim=None if c.get("head_dim") in (None, d // h) else c["head_dim"],  # decoupled heads (Qwen3, Gemma)
        d_ff=_get(c, "intermediate_size"), max_seq_len=c.get("max_position_embeddings", 2048), positional="rope",
        rope_layout="half", rope_base=float(rope.get("rope_theta", c.get("rope_theta", 10000.0))),
        norm="rmsnorm", norm_position="pre", activation="swiglu", dropout=0.0,
        attention_dropout=float(c.get("attention_dropout", 0.0)), bias=bool(c.get("attention_bias", False)),
        tie_embeddings=c.get("tie_word_embeddings", False), norm_eps=c.get("rms_norm_eps", 1e-6),
        pad_token_id=_pad(c, vocab), qk_norm=qwen3, sliding_window=window,
    )


def _llama_table(cfg: ModelConfig, arch: str) -> list[Entry]:
    tied = ("lm_head.weight",) if cfg.tie_embeddings else ()
    rows = [_e(("model.embed_tokens.weight", *tied), ("embeddings.embed_tokens.weight", *tied))]
    for i in range(cfg.n_layers):
        h, o = f"model.layers.{i}", f"stack.blocks.{i}"
        rows += _norm(f"{h}.input_layernorm", f"{o}.attn_add_norm.norm", False)
        for p in ("q_proj", "k_proj", "v_proj", "o_proj"):  # q/k rows in the "half" RoPE layout
            rows += _linear(f"{h}.self_attn.{p}", f"{o}.attn.{p}", cfg.bias)
        if cfg.qk_norm:  # Qwen3: RMSNorm over each head's Dh, weight (Dh,), before RoPE
            rows += _norm(f"{h}.self_attn.q_norm", f"{o}.attn.q_norm", False)
            rows += _norm(f"{h}.self_attn.k_norm", f"{o}.attn.k_norm", False)
        rows += _norm(f"{h}.post_attention_layernorm", f"{o}.ffn_add_norm.norm", False)
        for p in ("gate_proj", "up_proj", "down_proj"):  # down(silu(gate(x)) * up(x))
            rows += _linear(f"{h}.mlp.{p}", f"{o}.ffn.{p}", cfg.bias)
    rows += _norm("model.norm", "stack.final_norm", False)
    return rows + ([] if tied else [_e("lm_head.weight", "lm_head.weight")])


def _llama_write(cfg: ModelConfig, arch: str) -> dict:
    out = dict(
        vocab_size=cfg.vocab_size, hidden_size=cfg.d_model, num_attention_heads=cfg.n_heads,
        num_key_value_heads=cfg.kv_heads, num_hidden_layers=cfg.n_layers,
        intermediate_size=cfg.d_ff or default_d_ff(cfg.d_model, cfg.activation), head_dim=cfg.dh,
        max_position_embeddings=cfg.max_seq_len, rms_norm_eps=cfg.norm_eps, hidden_act="silu",
        rope_theta=cfg.rope_base, attention_bias=cfg.bias, mlp_bias=cfg.bias, attention_dropout=cfg.attention_dropout,
        tie_word_embeddings=cfg.tie_embeddings,
    )
    if arch in ("Qwen3ForCausalLM", "MistralForCausalLM"):  # no bias fields; rope_theta lives in rope_parameters
        del out["mlp_bias"], out["rope_theta"], out["attention_bias"]
        out.update(rope_parameters={"rope_type": "default", "rope_theta": cfg.rope_base})
    if arch == "Qwen3ForCausalLM":
        out.update(attention_bias=False, use_sliding_window=False)
    if arch == "MistralForCausalLM":
        out.update(sliding_window=cfg.sliding_window)
    return out


# ================================================================================================ T5

# feed_forward_proj → our activation. HF runs "gated-gelu" (T5 v1.1, flan-t5) with dense_act_fn="gelu_new", the
# tanh GELU, as act(wi_0(x)) * wi_1(x): our "geglu_tanh"; "gated-silu" is silu(wi_0(x)) * wi_1(x): "swiglu".
_T5_FFN = {"relu": "relu", "gelu": "gelu", "gated-silu": "swiglu", "gated-gelu": "geglu_tanh"}


def _t5_config(c: dict, arch: str) -> ModelConfig:
    d, h, vocab = _get(c, "d_model"), _get(c, "num_heads"), _get(c, "vocab_size")
    d_kv = c.get("d_kv", 64)
    ffn = c.get("feed_forward_proj", "relu")
    if ffn not in _T5_FFN:
        raise _refuse(arch, f"feed_forward_proj={ffn!r} (supported: {', '.join(_T5_FFN)})")
    tied = c.get("tie_word_embeddings", True) is not False
    scaled = c.get("scale_decoder_outputs", tied)  # v1.0: tied head and hidden * d_model**-0.5; v1.1: neither
    pad = _pad(c, vocab)
    start = c.get("decoder_start_token_id")
    rate = c.get("dropout_rate", 0.1)
    return ModelConfig(
        architecture="seq2seq", vocab_size=vocab, d_model=d, n_heads=h, n_layers=_get(c, "num_layers"),
        head_dim=None if d_kv * h == d else d_kv,  # T5 v1.1 small: 6 heads of 64 on d_model 512
        n_decoder_layers=c.get("num_decoder_layers") or _get(c, "num_layers"), d_ff=_get(c, "d_ff"),
        positional="t5", t5_num_buckets=c.get("relative_attention_num_buckets", 32),
        t5_max_distance=c.get("relative_attention_max_distance", 128), norm="rmsnorm", norm_position="pre",
        activation=_T5_FFN[ffn], bias=False, attn_scale=1.0, dropout=rate, attention_dropout=rate,
        tie_embeddings=tied, norm_eps=c.get("layer_norm_epsilon", 1e-6),
        output_scale=d**-0.5 if scaled else 1.0,
        pad_token_id=start if isinstance(start, int) and 0 <= start < vocab else pad,  # our decoder start id
    )


def _t5_table(cfg: ModelConfig, arch: str) -> list[Entry]:
    tied = ("lm_head.weight",) if cfg.tie_embeddings else ()
    rows = [_e(("shared.weight", "encoder.embed_tokens.weight", "decoder.embed_tokens.weight", *tied),
               ("encoder.embeddings.embed_tokens.weight", "decoder.embeddings.embed_tokens.weight", *tied))]
    gated = cfg.activation in GATED  # DenseGatedActDense: wi_0 is the gate, wi_1 the linear half
    for side, n, names in (("encoder", cfg.n_layers, ("SelfAttention", "DenseReluDense")),
                           ("decoder", cfg.decoder_layers, ("SelfAttention", "EncDecAttention", "DenseReluDense"))):
        # block 0 owns the stack's one relative-bias table (num_buckets, H)
        rows.append(_e(f"{side}.block.0.layer.0.SelfAttention.relative_attention_bias.weight",
                       f"{side}.stack.position_bias.relative_attention_bias.weight"))
        for i in range(n):
            h, o = f"{side}.block.{i}.layer", f"{side}.stack.blocks.{i}"
            ours = {"SelfAttention": ("attn", "attn_add_norm"), "EncDecAttention": ("cross_attn", "cross_add_norm"),
                    "DenseReluDense": ("ffn", "ffn_add_norm")}
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
    return rows + ([] if tied else [_e("lm_head.weight", "lm_head.weight")])


def _t5_write(cfg: ModelConfig, arch: str) -> dict:
    return dict(
        vocab_size=cfg.vocab_size, d_model=cfg.d_model, d_kv=cfg.dh, num_heads=cfg.n_heads,
        d_ff=cfg.d_ff or default_d_ff(cfg.d_model, cfg.activation), num_layers=cfg.n_layers,
        num_decoder_layers=cfg.decoder_layers, relative_attention_num_buckets=cfg.t5_num_buckets,
        relative_attention_max_distance=cfg.t5_max_distance, dropout_rate=cfg.dropout,
        layer_norm_epsilon=cfg.norm_eps, feed_forward_proj={v: k for k, v in _T5_FFN.items()}[cfg.activation],
        # transformers reads this flag as "scale the decoder output" (and, before v5, as "tie the head"); to_hf
        # checks afterwards that the head it built is the one we wrote
        tie_word_embeddings=not math.isclose(cfg.output_scale, 1.0), pad_token_id=cfg.pad_token_id,
        decoder_start_token_id=cfg.pad_token_id,
    )


# ================================================================================================ registry

@dataclass(frozen=True)
class Family:
    name: str
    archs: tuple[str, ...]
    config_class: str  # the transformers config class
    read_config: Callable[[dict, str], ModelConfig]
    table: Callable[[ModelConfig, str], list[Entry]]
    write_config: Callable[[ModelConfig, str], dict]
    base_prefix: dict[str, str]  # arch → prefix that headless checkpoints (GPT2Model, ...) lack
    buffers: tuple[str, ...] = ()  # regexes of checkpoint keys that are buffers, not weights
    requires: dict[str, tuple] = field(default_factory=dict)  # ModelConfig fields to_hf needs


_PRE_DECODER = dict(norm_position=("pre",), scale_embeddings=(False,), embedding_norm=(False,),
                    type_vocab_size=(0,), final_norm=(None, True))
FAMILIES = {
    "gpt2": Family(
        "gpt2", ("GPT2LMHeadModel",), "GPT2Config", _gpt2_config, _gpt2_table, _gpt2_write,
        {"GPT2LMHeadModel": "transformer."}, (r"\.attn\.(bias|masked_bias)$",),
        dict(architecture=("decoder_lm",), positional=("learned",), norm=("layernorm",), fused_qkv=(True,),
             bias=(True,), activation=tuple(_ACT_TO_HF), attn_scale=(None, 1.0), qk_norm=(False,),
             sliding_window=(None,), **_PRE_DECODER)),
    "bert": Family(
        "bert", ("BertModel", "BertForSequenceClassification"), "BertConfig", _bert_config, _bert_table,
        _bert_write, {"BertForSequenceClassification": "bert."},
        (r"embeddings\.(position_ids|token_type_ids)$",),
        dict(architecture=("encoder", "classifier"), positional=("learned",), norm=("layernorm",),
             norm_position=("post",), embedding_norm=(True,), fused_qkv=(False,), bias=(True,),
             activation=tuple(_ACT_TO_HF), scale_embeddings=(False,), final_norm=(None, False), attn_scale=(None,),
             pooling=("cls",), qk_norm=(False,), sliding_window=(None,))),
    "llama": Family(
        "llama", ("LlamaForCausalLM",), "LlamaConfig", _llama_config, _llama_table, _llama_write,
        {"LlamaForCausalLM": "model."}, (r"rotary_emb\.inv_freq$",),
        dict(architecture=("decoder_lm",), positional=("rope",), norm=("rmsnorm",), activation=("swiglu",),
             fused_qkv=(False,), attn_scale=(None,), qk_norm=(False,), sliding_window=(None,), **_PRE_DECODER)),
    "mistral": Family(  # Llama + sliding-window attention on every layer (or none: sliding_window null)
        "mistral", ("MistralForCausalLM",), "MistralConfig", _llama_config, _llama_table, _llama_write,
        {"MistralForCausalLM": "model."}, (r"rotary_emb\.inv_freq$",),
        dict(architecture=("decoder_lm",), positional=("rope",), norm=("rmsnorm",), activation=("swiglu",),
             fused_qkv=(False,), attn_scale=(None,), qk_norm=(False,), bias=(False,), **_PRE_DECODER)),
    "qwen3": Family(  # Llama + QK-norm (and usually heads wider than hidden_size / num_attention_heads)
        "qwen3", ("Qwen3ForCausalLM",), "Qwen3Config", _llama_config, _llama_table, _llama_write,
        {"Qwen3ForCausalLM": "model."}, (r"rotary_emb\.inv_freq$",),
        dict(architecture=("decoder_lm",), positional=("rope",), norm=("rmsnorm",), activation=("swiglu",),
             fused_qkv=(False,), attn_scale=(None,), qk_norm=(True,), bias=(False,), sliding_window=(None,),
             **_PRE_DECODER)),
    "t5": Family(
        "t5", ("T5ForConditionalGeneration",), "T5Config", _t5_config, _t5_table, _t5_write, {},
        (r"EncDecAttention\.relative_attention_bias\.weight$",),  # present but unused in some old checkpoints
        dict(architecture=("seq2seq",), positional=("t5",), norm=("rmsnorm",), bias=(False,), attn_scale=(1.0,),
             activation=tuple(_T5_FFN.values()), fused_qkv=(False,), qk_norm=(False,), sliding_window=(None,),
             **_PRE_DECODER)),
}
ARCH_FAMILY = {arch: fam for fam in FAMILIES.values() for arch in fam.archs}


def family_for_arch(arch: str) -> Family:
    if arch not in ARCH_FAMILY:
        raise CheckpointError(f"unsupported architecture {arch!r}; supported: {', '.join(SUPPORTED)}")
    return ARCH_FAMILY[arch]


def arch_of(hf_config: dict) -> str:
    archs = hf_config.get("architectures") or []
    if not archs:
        raise CheckpointError(f"Hugging Face config names no \"architectures\" (model_type "
                              f"{hf_config.get('model_type')!r}); supported: {', '.join(SUPPORTED)}")
    return archs[0]


def config_from_hf(hf_config: Any, arch: str | None = None) -> ModelConfig:
    """A ``ModelConfig`` from an HF config (``PretrainedConfig`` or its ``config.json`` dict)."""
    c = hf_config if isinstance(hf_config, dict) else hf_config.to_dict()
    arch = arch or arch_of(c)
    return family_for_arch(arch).read_config(c, arch)


# ================================================================================================ HF → ours

def _normalize(tensors: dict[str, torch.Tensor], fam: Family, arch: str) -> dict[str, torch.Tensor]:
    """Checkpoints saved from the headless class (``GPT2Model``: ``h.0...``) get the head class's prefix."""
    prefix = fam.base_prefix.get(arch)
    if not prefix or any(k.startswith(prefix) for k in tensors):
        return tensors
    heads = ("lm_head.", "classifier.")
    return {k if k.startswith(heads) else prefix + k: v for k, v in tensors.items()}


def load_hf_state(model: nn.Module, tensors: dict[str, torch.Tensor], arch: str, *, source: str = "") -> None:
    """Fill ``model`` (built from ``config_from_hf``) from an HF state dict through the key table, checking counts
    and shapes first. Errors name ``source``, the key and both shapes."""
    fam = family_for_arch(arch)
    where = f"{source}: " if source else ""
    tensors = _normalize(tensors, fam, arch)
    expected = model.state_dict()
    out: dict[str, torch.Tensor] = {}
    used, missing = set(), []
    for entry in fam.table(model.config, arch):
        present = [k for k in entry.hf if k in tensors]
        if not present:
            if entry.op != "drop":
                missing.append(entry.hf[0])
            continue
        used.update(present)
        value = tensors[present[0]]
        for alias in present[1:]:
            other = tensors[alias]
            if other.shape != value.shape or not torch.equal(other, value):
                raise CheckpointError(f"{where}{alias!r} should be tied to {present[0]!r} "
                                      "(tie_word_embeddings) but holds different values")
        if entry.op == "drop":
            continue
        want = tuple(expected[entry.ours[0]].shape)
        want_hf = want[::-1] if entry.op == "conv1d" and len(want) == 2 else want
        if tuple(value.shape) != want_hf:
            raise CheckpointError(f"{where}weight {present[0]!r} has shape {tuple(value.shape)}, but the config "
                                  f"implies {want_hf}")
        value = value.t() if entry.op == "conv1d" and value.dim() == 2 else value
        out.update(dict.fromkeys(entry.ours, value))
    buffers = [re.compile(p) for p in fam.buffers]
    unexpected = sorted(k for k in set(tensors) - used if not any(p.search(k) for p in buffers))
    if missing or unexpected:
        raise CheckpointError(f"{where}checkpoint keys do not match the {arch} key table: missing "
                              f"{missing[:6]}{' ...' if len(missing) > 6 else ''}, unexpected "
                              f"{unexpected[:6]}{' ...' if len(unexpected) > 6 else ''}")
    if set(out) != set(expected):  # the table and the builder disagree: a bug here, not in the checkpoint
        raise RuntimeError(f"{arch} key table does not cover our model: unfilled {sorted(set(expected) - set(out))}"
                           f", unknown {sorted(set(out) - set(expected))}")
    floats = {t.dtype for t in out.values() if t.is_floating_point()}
    if len(floats) == 1:
        model.to(floats.pop())
    model.load_state_dict(out)


def model_from_checkpoint(hf_config: dict, tensors: dict[str, torch.Tensor], *, source: str = "",
                          rope_layout: str = "half") -> nn.Module:
    """Our model from an HF ``config.json`` dict and its tensors (no ``transformers`` needed)."""
    from anatomy.models import build_model

    arch = arch_of(hf_config)
    config = config_from_hf(hf_config, arch)
    model = build_model(config)
    load_hf_state(model, tensors, arch, source=source)
    if rope_layout != config.rope_layout:
        from anatomy.interop.rope_layout import convert_rope_layout

        model = convert_rope_layout(model, rope_layout)
    return model


def from_hf(model: nn.Module, *, rope_layout: str = "half") -> nn.Module:
    """Our model with the weights of a live HF model of a supported architecture (same device, dtype and
    train/eval mode).

    ``rope_layout="interleaved"`` permutes Llama's q/k rows into the interleaved layout (same logits)."""
    arch = type(model).__name__
    if arch not in SUPPORTED or not hasattr(model, "config"):
        raise TypeError(f"from_hf: unsupported model {arch}; supported: {', '.join(SUPPORTED)}")
    config = model.config.to_dict()
    config["architectures"] = [arch]
    ours = model_from_checkpoint(config, model.state_dict(), source=arch, rope_layout=rope_layout)
    return ours.to(next(model.parameters()).device).train(model.training)


# ================================================================================================ ours → HF

def family_of(config: ModelConfig) -> tuple[Family, str]:
    """The HF family and architecture that can hold ``config``, or a ValueError naming what does not fit."""
    best: tuple[int, str, list[str]] | None = None
    for fam in FAMILIES.values():
        wrong = [f"{name}={getattr(config, name)!r} (needs {' or '.join(map(repr, allowed))})"
                 for name, allowed in fam.requires.items() if getattr(config, name) not in allowed]
        if fam.name not in ("llama", "mistral", "qwen3") and config.kv_heads != config.n_heads:
            wrong.append(f"n_kv_heads={config.n_kv_heads} (needs n_kv_heads == n_heads)")
        if fam.name == "bert" and config.type_vocab_size < 1:
            wrong.append("type_vocab_size=0 (BERT always adds token-type embeddings)")
        if fam.name == "bert" and config.architecture == "classifier" and not config.pooler:
            wrong.append("pooler=False (BertForSequenceClassification has a tanh pooler)")
        if fam.name == "t5" and not any(math.isclose(config.output_scale, s) for s in (1.0, config.d_model**-0.5)):
            wrong.append(f"output_scale={config.output_scale} (T5 uses 1.0 or d_model**-0.5)")
        if fam.name in ("gpt2", "bert") and config.dh * config.n_heads != config.d_model:
            wrong.append(f"head_dim={config.head_dim} ({fam.name}'s heads split d_model: needs n_heads * head_dim "
                         "== d_model)")
        if fam.name != "t5" and config.output_scale != 1.0:
            wrong.append(f"output_scale={config.output_scale} (needs 1.0)")
        if not wrong:
            arch = {"classifier": "BertForSequenceClassification", "encoder": "BertModel"}.get(
                config.architecture, fam.archs[0])
            return fam, arch
        if best is None or len(wrong) < best[0]:
            best = (len(wrong), fam.name, wrong)
    _, name, wrong = best
    raise ValueError(f"to_hf: this config fits no supported Hugging Face architecture ({', '.join(SUPPORTED)}); "
                     f"closest is {name}, which needs: {'; '.join(wrong)}")


def hf_state_dict(model: nn.Module) -> tuple[str, dict, dict[str, torch.Tensor]]:
    """``(architecture, HF config kwargs, HF state dict)`` for one of our models (no ``transformers`` needed)."""
    config = getattr(model, "config", None)
    if not isinstance(config, ModelConfig):
        raise TypeError(f"to_hf needs a model built by anatomy.build_model, got {type(model).__name__}")
    fam, arch = family_of(config)
    ours = model.state_dict()
    if config.positional == "rope" and config.rope_layout != "half":
        ours = convert_rope_state(ours, config, "half")  # HF Llama rotates in the half layout
        config = config.replace(rope_layout="half")
    out: dict[str, torch.Tensor] = {}
    for entry in fam.table(config, arch):
        if entry.op == "drop":
            continue
        value = ours[entry.ours[0]]
        value = value.t().contiguous() if entry.op == "conv1d" and value.dim() == 2 else value
        out.update(dict.fromkeys(entry.hf, value))
    return arch, fam.write_config(config, arch), out


def to_hf(model: nn.Module) -> nn.Module:
    """A ``transformers`` model holding our model's weights (needs the ``[hf]`` extra). Every HF parameter is
    checked against the value written, so an HF-side tie we did not ask for is an error, not a silent change."""
    try:
        import transformers
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError("to_hf needs transformers: pip install 'transformer-anatomy[hf]'") from err
    arch, kwargs, state = hf_state_dict(model)
    fam = ARCH_FAMILY[arch]
    hf_config = getattr(transformers, fam.config_class)(**kwargs)
    hf_config.architectures = [arch]
    extra = {"add_pooling_layer": False} if arch == "BertModel" else {}
    hf_model = getattr(transformers, arch)(hf_config, **extra)
    first = next(model.parameters())
    hf_model.to(device=first.device, dtype=first.dtype)
    result = hf_model.load_state_dict(state, strict=False)
    buffers = [re.compile(p) for p in fam.buffers]
    missing = [k for k in result.missing_keys if not any(p.search(k) for p in buffers)]
    if missing or result.unexpected_keys:
        raise RuntimeError(f"to_hf: {arch} state dict mismatch: missing {missing[:6]}, "
                           f"unexpected {result.unexpected_keys[:6]}")
    for name, value in hf_model.state_dict().items():
        if name in state and not torch.equal(value, state[name].to(value.dtype)):
            raise ValueError(f"to_hf: transformers {transformers.__version__} does not keep {name!r} as written "
                             f"(it ties it to another weight); this {arch} config cannot be expressed there")
    return hf_model.train(model.training)
