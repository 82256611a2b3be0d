"""The Hugging Face families ``anatomy.interop.hf`` converts: how a ``config.json`` becomes a ``ModelConfig``
(``read_config``), the key table between their state dict and ours (``table``: every key used once, shapes checked
by the caller), and the config written back (``write_config``). GPT-2, BERT and T5 have a section here; the
Llama-shaped families (Llama, Mistral, Qwen2, Qwen3, Phi-3) live in ``hf_llama``, Gemma and Gemma 2 in
``hf_gemma``, GPT-NeoX in ``hf_neox``; shared rows and helpers in ``hf_common``. The registry at the end
(``FAMILIES``) says which of our configs each family can hold (``requires``)."""

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from anatomy.components.ffn import GATED, default_d_ff
from anatomy.config import ModelConfig
from anatomy.interop.hf_common import _ACT_TO_HF, Entry, _activation, _e, _get, _linear, _lm_head, _norm, _pad, _refuse
from anatomy.interop.hf_gemma import gemma_config, gemma_table, gemma_write
from anatomy.interop.hf_llama import llama_config, llama_table, llama_write
from anatomy.interop.hf_neox import neox_config, neox_table, neox_write

# ================================================================================================ GPT-2


def _gpt2_config(c: dict, arch: str) -> ModelConfig:
    if c.get("scale_attn_by_inverse_layer_idx"):
        raise _refuse(arch, "scale_attn_by_inverse_layer_idx=True")
    if c.get("add_cross_attention"):
        raise _refuse(arch, "add_cross_attention=True")
    d, vocab = _get(c, "n_embd"), _get(c, "vocab_size")
    return ModelConfig(
        architecture="decoder_lm",
        vocab_size=vocab,
        d_model=d,
        n_heads=_get(c, "n_head"),
        n_layers=_get(c, "n_layer"),
        d_ff=c.get("n_inner") or 4 * d,
        max_seq_len=c.get("n_positions", 1024),
        positional="learned",
        norm="layernorm",
        norm_position="pre",
        activation=_activation(arch, c.get("activation_function", "gelu_new")),
        dropout=c.get("resid_pdrop", 0.1),
        attention_dropout=c.get("attn_pdrop", 0.1),
        bias=True,
        tie_embeddings=c.get("tie_word_embeddings", True),
        fused_qkv=True,
        norm_eps=c.get("layer_norm_epsilon", 1e-5),
        attn_scale=None if c.get("scale_attn_weights", True) else 1.0,
        pad_token_id=_pad(c, vocab),
    )


def _gpt2_table(cfg: ModelConfig, arch: str) -> list[Entry]:
    tied = ("lm_head.weight",) if cfg.tie_embeddings else ()
    rows = [
        _e(("transformer.wte.weight", *tied), ("embeddings.embed_tokens.weight", *tied)),
        _e("transformer.wpe.weight", "embeddings.positional.weight"),
    ]
    for i in range(cfg.n_layers):
        h, o = f"transformer.h.{i}", f"stack.blocks.{i}"
        rows += _norm(f"{h}.ln_1", f"{o}.attn_add_norm.norm", True)
        rows += _linear(f"{h}.attn.c_attn", f"{o}.attn.qkv_proj", True, "conv1d")  # (D, 3D) → (3D, D)
        rows += _linear(f"{h}.attn.c_proj", f"{o}.attn.o_proj", True, "conv1d")  # (D, D) → (D, D)^T
        rows += _norm(f"{h}.ln_2", f"{o}.ffn_add_norm.norm", True)
        rows += _linear(f"{h}.mlp.c_fc", f"{o}.ffn.up_proj", True, "conv1d")  # (D, F) → (F, D)
        rows += _linear(f"{h}.mlp.c_proj", f"{o}.ffn.down_proj", True, "conv1d")  # (F, D) → (D, F)
    rows += _norm("transformer.ln_f", "stack.final_norm", True)
    return rows + _lm_head(tied)


def _gpt2_write(cfg: ModelConfig, arch: str) -> dict:
    return dict(
        n_embd=cfg.d_model,
        n_head=cfg.n_heads,
        n_layer=cfg.n_layers,
        n_inner=cfg.d_ff or default_d_ff(cfg.d_model, cfg.activation),
        n_positions=cfg.max_seq_len,
        activation_function=_ACT_TO_HF[cfg.activation],
        layer_norm_epsilon=cfg.norm_eps,
        resid_pdrop=cfg.dropout,
        embd_pdrop=cfg.dropout,
        attn_pdrop=cfg.attention_dropout,
        scale_attn_weights=cfg.attn_scale is None,
        tie_word_embeddings=cfg.tie_embeddings,
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
        vocab_size=vocab,
        d_model=_get(c, "hidden_size"),
        n_heads=_get(c, "num_attention_heads"),
        n_layers=_get(c, "num_hidden_layers"),
        d_ff=_get(c, "intermediate_size"),
        max_seq_len=c.get("max_position_embeddings", 512),
        positional="learned",
        norm="layernorm",
        norm_position="post",
        activation=_activation(arch, c.get("hidden_act", "gelu")),
        dropout=c.get("hidden_dropout_prob", 0.1),
        attention_dropout=c.get("attention_probs_dropout_prob", 0.1),
        bias=True,
        embedding_norm=True,
        type_vocab_size=c.get("type_vocab_size", 2),
        norm_eps=c.get("layer_norm_eps", 1e-12),
        pooler=arch == "BertForSequenceClassification",
        num_labels=labels,
        pad_token_id=_pad(c, vocab),
    )


def _bert_table(cfg: ModelConfig, arch: str) -> list[Entry]:
    cls = arch == "BertForSequenceClassification"
    b, e = ("bert.", "encoder.") if cls else ("", "")
    rows = [
        _e(f"{b}embeddings.word_embeddings.weight", f"{e}embeddings.embed_tokens.weight"),
        _e(f"{b}embeddings.position_embeddings.weight", f"{e}embeddings.positional.weight"),
        _e(f"{b}embeddings.token_type_embeddings.weight", f"{e}embeddings.token_types.weight"),
        *_norm(f"{b}embeddings.LayerNorm", f"{e}embeddings.norm", True),
    ]
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
    if cfg.encoder_pooler:  # BertModel's pooler (add_pooling_layer=True, HF's default): our Encoder's pooler_output
        return rows + _linear("pooler.dense", "pooler", True)
    return rows + _linear("pooler.dense", "-", True, "drop")  # a headless checkpoint's pooler, read past


def _bert_write(cfg: ModelConfig, arch: str) -> dict:
    out = dict(
        hidden_size=cfg.d_model,
        num_attention_heads=cfg.n_heads,
        num_hidden_layers=cfg.n_layers,
        intermediate_size=cfg.d_ff or default_d_ff(cfg.d_model, cfg.activation),
        hidden_act=_ACT_TO_HF[cfg.activation],
        max_position_embeddings=cfg.max_seq_len,
        type_vocab_size=cfg.type_vocab_size,
        layer_norm_eps=cfg.norm_eps,
        hidden_dropout_prob=cfg.dropout,
        attention_probs_dropout_prob=cfg.attention_dropout,
        pad_token_id=cfg.pad_token_id,
    )
    if arch == "BertForSequenceClassification":
        out["num_labels"] = cfg.num_labels
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
        activation=_T5_FFN[ffn],
        bias=False,
        attn_scale=1.0,
        dropout=rate,
        attention_dropout=rate,
        tie_embeddings=tied,
        norm_eps=c.get("layer_norm_epsilon", 1e-6),
        output_scale=d**-0.5 if scaled else 1.0,
        pad_token_id=start if isinstance(start, int) and 0 <= start < vocab else pad,  # our decoder start id
    )


def _t5_table(cfg: ModelConfig, arch: str) -> list[Entry]:
    tied = ("lm_head.weight",) if cfg.tie_embeddings else ()
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


def _t5_write(cfg: ModelConfig, arch: str) -> dict:
    return dict(
        d_model=cfg.d_model,
        d_kv=cfg.dh,
        num_heads=cfg.n_heads,
        d_ff=cfg.d_ff or default_d_ff(cfg.d_model, cfg.activation),
        num_layers=cfg.n_layers,
        num_decoder_layers=cfg.decoder_layers,
        relative_attention_num_buckets=cfg.t5_num_buckets,
        relative_attention_max_distance=cfg.t5_max_distance,
        dropout_rate=cfg.dropout,
        layer_norm_epsilon=cfg.norm_eps,
        feed_forward_proj={v: k for k, v in _T5_FFN.items()}[cfg.activation],
        # transformers reads this flag as "scale the decoder output" (and, before v5, as "tie the head"); to_hf
        # checks afterwards that the head it built is the one we wrote
        tie_word_embeddings=not math.isclose(cfg.output_scale, 1.0),
        pad_token_id=cfg.pad_token_id,
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
    write_config: Callable[[ModelConfig, str], dict]  # everything but vocab_size, which to_hf writes for all
    base_prefix: dict[str, str]  # arch → prefix that headless checkpoints (GPT2Model, ...) lack
    buffers: tuple[str, ...] = ()  # regexes of checkpoint keys that are buffers, not weights
    requires: dict[str, tuple] = field(default_factory=dict)  # ModelConfig fields to_hf needs
    renames: tuple[tuple[str, str], ...] = ()  # (regex, replacement): older checkpoint key spellings, read only


_PRE_DECODER = dict(
    norm_position=("pre",),
    scale_embeddings=(False,),
    embedding_norm=(False,),
    type_vocab_size=(0,),
    final_norm=(None, True),
)
# the options of the later families at their plain values: a family that does not name one needs it plain
# (qkv_bias is checked against bias by family_of)
_PLAIN = dict(
    rope_scaling=(None,),
    rope_fraction=(1.0,),
    parallel_residual=(False,),
    norm_weight_offset=(0.0,),
    attn_softcap=(None,),
    final_logit_softcap=(None,),
)
_ROPE_SCALED = dict(rope_scaling=(None, "linear", "dynamic", "llama3", "yarn"))  # transformers' ROPE_INIT_FUNCTIONS
_LLAMA = dict(
    architecture=("decoder_lm",),
    positional=("rope",),
    norm=("rmsnorm",),
    activation=("swiglu",),
    fused_qkv=(False,),
    attn_scale=(None,),
    qk_norm=(False,),
    **_PRE_DECODER,
)
_ROTARY = (r"rotary_emb\.inv_freq$",)


def _needs(**fields: tuple | None) -> dict[str, tuple]:
    """What ``to_hf`` checks: the plain later options unless named; a field named with None takes any value."""
    return {k: v for k, v in {**_PLAIN, **fields}.items() if v is not None}


def _llama_like(name: str, arch: str, config_class: str, **fields: tuple | None) -> Family:
    return Family(
        name,
        (arch,),
        config_class,
        llama_config,
        llama_table,
        llama_write,
        {arch: "model."},
        _ROTARY,
        _needs(**{**_LLAMA, **_ROPE_SCALED, **fields}),
    )


FAMILIES = {
    "gpt2": Family(
        "gpt2",
        ("GPT2LMHeadModel",),
        "GPT2Config",
        _gpt2_config,
        _gpt2_table,
        _gpt2_write,
        {"GPT2LMHeadModel": "transformer."},
        (r"\.attn\.(bias|masked_bias)$",),
        _needs(
            architecture=("decoder_lm",),
            positional=("learned",),
            norm=("layernorm",),
            fused_qkv=(True,),
            bias=(True,),
            activation=tuple(_ACT_TO_HF),
            attn_scale=(None, 1.0),
            qk_norm=(False,),
            sliding_window=(None,),
            **_PRE_DECODER,
        ),
    ),
    "bert": Family(
        "bert",
        ("BertModel", "BertForSequenceClassification"),
        "BertConfig",
        _bert_config,
        _bert_table,
        _bert_write,
        {"BertForSequenceClassification": "bert."},
        (r"embeddings\.(position_ids|token_type_ids)$",),
        _needs(
            architecture=("encoder", "classifier"),
            positional=("learned",),
            norm=("layernorm",),
            norm_position=("post",),
            embedding_norm=(True,),
            fused_qkv=(False,),
            bias=(True,),
            activation=tuple(_ACT_TO_HF),
            scale_embeddings=(False,),
            final_norm=(None, False),
            attn_scale=(None,),
            pooling=("cls",),
            qk_norm=(False,),
            sliding_window=(None,),
        ),
    ),
    "llama": _llama_like("llama", "LlamaForCausalLM", "LlamaConfig", sliding_window=(None,)),
    # Llama + sliding-window attention on every layer (or none: sliding_window null)
    "mistral": _llama_like("mistral", "MistralForCausalLM", "MistralConfig", bias=(False,), window_pattern=(None,)),
    # Llama + bias on q/k/v only (o_proj and the MLP without); windows per layer like Qwen3
    "qwen2": _llama_like("qwen2", "Qwen2ForCausalLM", "Qwen2Config", bias=(False,), qkv_bias=(True,)),
    # Llama + QK-norm (usually heads wider than hidden_size / num_attention_heads); windows per layer
    "qwen3": _llama_like("qwen3", "Qwen3ForCausalLM", "Qwen3Config", qk_norm=(True,), bias=(False,)),
    # Llama with fused qkv_proj and gate_up_proj, partial rotary allowed, a window on every layer (or none);
    # transformers' Phi-3 takes only plain RoPE (or longrope, which we refuse)
    "phi3": _llama_like(
        "phi3",
        "Phi3ForCausalLM",
        "Phi3Config",
        fused_qkv=(True,),
        bias=(False,),
        window_pattern=(None,),
        rope_scaling=(None,),
        rope_fraction=None,
    ),
    "gemma": Family(
        "gemma",
        ("GemmaForCausalLM",),
        "GemmaConfig",
        gemma_config,
        gemma_table,
        gemma_write,
        {"GemmaForCausalLM": "model."},
        _ROTARY,
        _needs(
            **{
                **_LLAMA,
                **_ROPE_SCALED,
                "activation": ("geglu_tanh",),
                "scale_embeddings": (True,),
                "norm_weight_offset": (1.0,),
                "bias": (False,),
                "sliding_window": (None,),
            }
        ),
    ),
    "gemma2": Family(  # Gemma + sandwich norms, soft-capping, query_pre_attn_scalar, windows on alternate layers
        "gemma2",
        ("Gemma2ForCausalLM",),
        "Gemma2Config",
        gemma_config,
        gemma_table,
        gemma_write,
        {"Gemma2ForCausalLM": "model."},
        _ROTARY,
        _needs(
            **{
                **_LLAMA,
                **_ROPE_SCALED,
                "activation": ("geglu_tanh",),
                "scale_embeddings": (True,),
                "norm_weight_offset": (1.0,),
                "bias": (False,),
                "norm_position": ("sandwich",),
                "attn_scale": None,
                "attn_softcap": None,
                "final_logit_softcap": None,
            }
        ),
    ),
    "gpt_neox": Family(  # Pre-LN with biases, partial rotary, parallel residual, per-head fused qkv, untied embed_out
        "gpt_neox",
        ("GPTNeoXForCausalLM",),
        "GPTNeoXConfig",
        neox_config,
        neox_table,
        neox_write,
        {"GPTNeoXForCausalLM": "gpt_neox."},
        (*_ROTARY, r"attention\.(bias|masked_bias)$"),
        _needs(
            **{
                **_PRE_DECODER,
                **_ROPE_SCALED,
                "architecture": ("decoder_lm",),
                "positional": ("rope",),
                "norm": ("layernorm",),
                "activation": tuple(_ACT_TO_HF),
                "fused_qkv": (True,),
                "bias": (True,),
                "attn_scale": (None,),
                "qk_norm": (False,),
                "sliding_window": (None,),
                "rope_fraction": None,
                "parallel_residual": (False, True),
            }
        ),
        renames=((r"^embed_out\.", "lm_head."),),
    ),
    "t5": Family(
        "t5",
        ("T5ForConditionalGeneration",),
        "T5Config",
        _t5_config,
        _t5_table,
        _t5_write,
        {},
        (r"EncDecAttention\.relative_attention_bias\.weight$",),  # present but unused in some old checkpoints
        _needs(
            architecture=("seq2seq",),
            positional=("t5",),
            norm=("rmsnorm",),
            bias=(False,),
            attn_scale=(1.0,),
            activation=tuple(_T5_FFN.values()),
            fused_qkv=(False,),
            qk_norm=(False,),
            sliding_window=(None,),
            **_PRE_DECODER,
        ),
    ),
}
ARCH_FAMILY = {arch: fam for fam in FAMILIES.values() for arch in fam.archs}
