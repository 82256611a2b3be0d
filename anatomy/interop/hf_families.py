"""The registry of the Hugging Face families ``anatomy.interop.hf`` converts: one :class:`Family` per model type, with
how a ``config.json`` becomes a ``ModelConfig`` (``read_config``), the key table between their state dict and ours
(``table``: every key used once, shapes checked by the caller), the config written back (``write_config``), and
which of our configs the family can hold (``requires``). Each family's three functions live in its module:
``hf_gpt2``, ``hf_bert``, ``hf_t5``, ``hf_llama`` (Llama, Mistral, Qwen2, Qwen3, Phi-3), ``hf_gemma`` (Gemma,
Gemma 2) and ``hf_neox`` (GPT-NeoX); shared rows and helpers in ``hf_common``."""

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from anatomy.config import ModelConfig
from anatomy.interop.hf_bert import bert_config, bert_table, bert_write
from anatomy.interop.hf_common import _ACT_TO_HF, Entry
from anatomy.interop.hf_gemma import gemma_config, gemma_table, gemma_write
from anatomy.interop.hf_gpt2 import gpt2_config, gpt2_table, gpt2_write
from anatomy.interop.hf_llama import llama_config, llama_table, llama_write
from anatomy.interop.hf_neox import neox_config, neox_table, neox_write
from anatomy.interop.hf_t5 import T5_FFN, t5_config, t5_table, t5_write


@dataclass(frozen=True)
class Family:
    name: str
    archs: tuple[str, ...]
    config_class: str  # the transformers config class
    read_config: Callable[[dict[str, Any], str], ModelConfig]
    table: Callable[[ModelConfig, str], list[Entry]]
    write_config: Callable[[ModelConfig, str], dict[str, Any]]  # everything but vocab_size, which to_hf writes for all
    base_prefix: dict[str, str]  # arch → prefix that headless checkpoints (GPT2Model, ...) lack
    buffers: tuple[str, ...] = ()  # regexes of checkpoint keys that are buffers, not weights
    requires: dict[str, tuple[object, ...]] = field(default_factory=dict)  # ModelConfig fields to_hf needs
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


def _needs(**fields: tuple[object, ...] | None) -> dict[str, tuple[object, ...]]:
    """What ``to_hf`` checks: the plain later options unless named; a field named with None takes any value."""
    return {k: v for k, v in {**_PLAIN, **fields}.items() if v is not None}


_LLAMA_FUNCTIONS = (llama_config, llama_table, llama_write)
# Gemma and Gemma 2 on top of Llama: the tanh-GELU gate, embeddings times sqrt(D), RMSNorm gains around 1, no bias
_GEMMA = dict(activation=("geglu_tanh",), scale_embeddings=(True,), norm_weight_offset=(1.0,), bias=(False,))


def _llama_like(
    name: str,
    arch: str,
    config_class: str,
    functions: tuple[
        Callable[[dict[str, Any], str], ModelConfig],
        Callable[[ModelConfig, str], list[Entry]],
        Callable[[ModelConfig, str], dict[str, Any]],
    ] = _LLAMA_FUNCTIONS,
    **fields: tuple[object, ...] | None,
) -> Family:
    """A family of one architecture with Llama's layout (``model.`` prefix, rotary buffers) and Llama's needs
    (any RoPE scaling) but for ``fields``; ``functions``: its config reader, key table and config writer."""
    read, table, write = functions
    return Family(
        name,
        (arch,),
        config_class,
        read,
        table,
        write,
        {arch: "model."},
        _ROTARY,
        _needs(**{**_LLAMA, **_ROPE_SCALED, **fields}),
    )


FAMILIES = {
    "gpt2": Family(
        "gpt2",
        ("GPT2LMHeadModel",),
        "GPT2Config",
        gpt2_config,
        gpt2_table,
        gpt2_write,
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
        bert_config,
        bert_table,
        bert_write,
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
    "gemma": _llama_like(
        "gemma",
        "GemmaForCausalLM",
        "GemmaConfig",
        (gemma_config, gemma_table, gemma_write),
        **_GEMMA,
        sliding_window=(None,),
    ),
    # Gemma + sandwich norms, soft-capping, query_pre_attn_scalar, windows on alternate layers
    "gemma2": _llama_like(
        "gemma2",
        "Gemma2ForCausalLM",
        "Gemma2Config",
        (gemma_config, gemma_table, gemma_write),
        **_GEMMA,
        norm_position=("sandwich",),
        attn_scale=None,
        attn_softcap=None,
        final_logit_softcap=None,
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
        t5_config,
        t5_table,
        t5_write,
        {},
        (r"EncDecAttention\.relative_attention_bias\.weight$",),  # present but unused in some old checkpoints
        _needs(
            architecture=("seq2seq",),
            positional=("t5",),
            norm=("rmsnorm",),
            bias=(False,),
            attn_scale=(1.0,),
            activation=tuple(T5_FFN.values()),
            fused_qkv=(False,),
            qk_norm=(False,),
            sliding_window=(None,),
            **_PRE_DECODER,
        ),
    ),
}
ARCH_FAMILY = {arch: fam for fam in FAMILIES.values() for arch in fam.archs}
