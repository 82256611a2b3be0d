"""The model presets: each family's design choices at a real published size, and how their sizes follow an
overridden ``d_model``. ``anatomy.config`` re-exports every name here (``from anatomy.config import PRESETS``);
``ModelConfig.from_preset`` reads them. Plain data: this module imports nothing from ``anatomy.config``.
"""

from __future__ import annotations

from typing import Any

from anatomy.components.ffn import default_d_ff

# The presets: each family's design choices at a real published size. Tests and the CLI shrink the sizes with
# overrides (``ModelConfig.from_preset("llama", d_model=64, n_layers=2)``); docs/presets.md lists how each one
# departs from the 2017 paper.
PRESETS: dict[str, dict[str, Any]] = {
    "vaswani-2017": dict(  # "Attention Is All You Need", base model
        architecture="seq2seq",
        vocab_size=37000,
        d_model=512,
        n_heads=8,
        n_layers=6,
        d_ff=2048,
        max_seq_len=512,
        positional="sinusoidal",
        norm="layernorm",
        norm_position="post",
        activation="relu",
        dropout=0.1,
        bias=True,
        tie_embeddings=True,
        scale_embeddings=True,
        init="xavier",
        norm_eps=1e-6,
    ),
    "bert": dict(  # BERT-base (Devlin et al. 2019)
        architecture="encoder",
        vocab_size=30522,
        d_model=768,
        n_heads=12,
        n_layers=12,
        d_ff=3072,
        max_seq_len=512,
        positional="learned",
        norm="layernorm",
        norm_position="post",
        activation="gelu",
        dropout=0.1,
        attention_dropout=0.1,
        bias=True,
        embedding_norm=True,
        type_vocab_size=2,
        norm_eps=1e-12,
        pooler=True,
        init="normal",
    ),
    "gpt2": dict(  # GPT-2 small (Radford et al. 2019)
        architecture="decoder_lm",
        vocab_size=50257,
        d_model=768,
        n_heads=12,
        n_layers=12,
        d_ff=3072,
        max_seq_len=1024,
        positional="learned",
        norm="layernorm",
        norm_position="pre",
        activation="gelu_tanh",
        dropout=0.1,
        attention_dropout=0.1,
        bias=True,
        tie_embeddings=True,
        fused_qkv=True,
        init="normal",
    ),
    "llama": dict(  # Llama architecture at SmolLM-135M's size: RMSNorm, RoPE (half), SwiGLU, GQA, no biases
        architecture="decoder_lm",
        vocab_size=49152,
        d_model=576,
        n_heads=9,
        n_kv_heads=3,
        n_layers=30,
        d_ff=1536,
        max_seq_len=2048,
        positional="rope",
        rope_layout="half",
        rope_base=10000.0,
        norm="rmsnorm",
        norm_position="pre",
        activation="swiglu",
        bias=False,
        tie_embeddings=True,
        norm_eps=1e-5,
        init="normal",
    ),
    "qwen3": dict(  # Qwen3-0.6B (Qwen team 2025): the Llama design + QK-norm, heads of 128 on d_model 1024
        architecture="decoder_lm",
        vocab_size=151936,
        d_model=1024,
        n_heads=16,
        n_kv_heads=8,
        head_dim=128,
        n_layers=28,
        d_ff=3072,
        max_seq_len=40960,
        positional="rope",
        rope_layout="half",
        rope_base=1000000.0,
        norm="rmsnorm",
        norm_position="pre",
        activation="swiglu",
        bias=False,
        tie_embeddings=True,
        norm_eps=1e-6,
        qk_norm=True,
        init="normal",
    ),
    "t5": dict(  # T5-small (Raffel et al. 2020)
        architecture="seq2seq",
        vocab_size=32128,
        d_model=512,
        n_heads=8,
        n_layers=6,
        d_ff=2048,
        max_seq_len=512,
        positional="t5",
        norm="rmsnorm",
        norm_position="pre",
        activation="relu",
        bias=False,
        attn_scale=1.0,
        dropout=0.1,
        attention_dropout=0.1,
        tie_embeddings=True,
        norm_eps=1e-6,
        init="normal",
        output_scale=512**-0.5,  # T5 v1.0's tied head reads the decoder output times d_model**-0.5 (as HF's T5)
    ),
    "seed-block": dict(  # the post's §5.1 worked example: B=2, T=10, D=16, H=4, d_k=4; one Post-Norm block
        architecture="encoder",
        vocab_size=100,
        d_model=16,
        n_heads=4,
        n_layers=1,
        d_ff=64,
        max_seq_len=64,
        positional="sinusoidal",
        norm="layernorm",
        norm_position="post",
        activation="gelu",
        dropout=0.0,
        init="xavier",
    ),
}


# One list of the presets too large to build whole for a look at shapes or weights, read from the presets
# themselves: ``anatomy trace`` and ``anatomy viz`` build such a preset untrained with a LOOK_VOCAB-token vocabulary
# (the shapes do not depend on it) unless ``vocab_size`` is given.
LOOK_VOCAB = 1000


def large_vocab_presets() -> tuple[str, ...]:
    """The presets whose published ``vocab_size`` is above :data:`LOOK_VOCAB` (every published size today)."""
    return tuple(name for name, values in PRESETS.items() if values.get("vocab_size", 0) > LOOK_VOCAB)


# How a preset's sizes follow an overridden d_model (each only when not given too):
#   d_ff        d_model times the preset's ratio; "gated": SwiGLU's 2/3 * 4 * D rounded up to 8 (Llama's rule)
#   head_width  n_heads = d_model / head_width, when d_model is a multiple of it (else the preset's count stays)
#               and head_dim is not given
#   n_kv_heads  then keeps the preset's group size H / Hkv (or the nearest wider sharing that divides H)
#   output_scale  "tied": d_model**-0.5 while the head is tied to the embedding, 1.0 once it is not (T5 v1.0 vs
#               v1.1; Hugging Face's scale_decoder_outputs follows tie_word_embeddings the same way)
# qwen3 sets head_dim, so its heads do not depend on d_model; seed-block's 4 heads are the post's example.
PRESET_RULES: dict[str, dict[str, Any]] = {
    "vaswani-2017": dict(d_ff=4, head_width=64),
    "bert": dict(d_ff=4, head_width=64),
    "gpt2": dict(d_ff=4, head_width=64),
    "llama": dict(d_ff="gated", head_width=64),
    "qwen3": dict(d_ff=3),
    "t5": dict(d_ff=4, head_width=64, output_scale="tied"),
    "seed-block": dict(d_ff=4),
}


def preset_sizes(name: str, overrides: dict[str, Any]) -> dict[str, Any]:
    """The sizes of preset ``name`` that follow ``overrides`` (``d_model``, ``n_heads``, ``tie_embeddings``) by
    ``PRESET_RULES``."""
    preset, rules, out = PRESETS[name], PRESET_RULES.get(name, {}), {}
    d = overrides.get("d_model", preset.get("d_model"))
    if not isinstance(d, int) or isinstance(d, bool) or d <= 0 or "d_model" not in overrides:
        d = None  # not overridden (or invalid: validation names it)
    if d is not None and "d_ff" not in overrides and "d_ff" in rules:
        ratio = rules["d_ff"]
        out["d_ff"] = default_d_ff(d, "swiglu") if ratio == "gated" else ratio * d
    width = rules.get("head_width")
    if d is not None and "n_heads" not in overrides and overrides.get("head_dim") is None and width and d % width == 0:
        out["n_heads"] = d // width
    heads = overrides.get("n_heads", out.get("n_heads", preset.get("n_heads")))
    kv = preset.get("n_kv_heads")
    if kv and "n_kv_heads" not in overrides and isinstance(heads, int) and heads > 0 and heads != preset["n_heads"]:
        limit = max(1, heads // (preset["n_heads"] // kv))  # as many query heads per kv head as the preset, or more
        out["n_kv_heads"] = max(k for k in range(1, limit + 1) if heads % k == 0)
    if rules.get("output_scale") == "tied" and "output_scale" not in overrides:
        width = overrides.get("d_model", preset["d_model"])
        tied = overrides.get("tie_embeddings", preset.get("tie_embeddings", True))
        if isinstance(width, int) and not isinstance(width, bool) and width > 0:  # else validation names d_model
            out["output_scale"] = width**-0.5 if tied else 1.0
    return out
