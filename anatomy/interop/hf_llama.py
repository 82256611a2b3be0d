"""The Llama-shaped Hugging Face families: Llama (with Llama 3's and the other RoPE scalings), Mistral (sliding
window), Qwen2 (bias on q/k/v only), Qwen3 (QK-norm, windows per layer) and Phi-3 (fused ``qkv_proj`` and
``gate_up_proj``). One reader, one key table and one writer, with each family's differences named where they
apply. The registry in ``hf_families`` says which of our configs each can hold."""

from __future__ import annotations

from typing import Any

from anatomy.config import ModelConfig
from anatomy.interop import hf_common as hc

PHI3, QWEN2, QWEN3 = "Phi3ForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM"


def llama_config(c: dict[str, Any], arch: str) -> ModelConfig:
    d, h, vocab = hc._get(c, "hidden_size"), hc._get(c, "num_attention_heads"), hc._get(c, "vocab_size")
    if c.get("hidden_act", "silu") != "silu":
        raise hc._refuse(arch, f"hidden_act={c['hidden_act']!r} (anatomy's Llama FFN is SwiGLU: silu)")
    bias, qkv_bias = bool(c.get("attention_bias", False)), None
    if arch == QWEN2:  # q/k/v always biased, o_proj and the MLP never (transformers has no field for it)
        bias, qkv_bias = False, True
    elif arch == PHI3:  # no bias anywhere
        bias = False
    elif bias != bool(c.get("mlp_bias", False)):
        raise hc._refuse(
            arch,
            f"attention_bias={c.get('attention_bias')!r} != mlp_bias={c.get('mlp_bias')!r} "
            "(anatomy's one bias flag covers o_proj and the MLP; q/k/v-only bias is Qwen2's)",
        )
    rope = hc.read_rope(c, arch, partial=arch == PHI3)
    window, pattern = _windows(c, arch)
    dropout = float(c.get("resid_pdrop", 0.0)) if arch == PHI3 else 0.0
    return ModelConfig(
        **llama_shape(c, vocab, 2048),
        head_dim=None if c.get("head_dim") in (None, d // h) else c["head_dim"],  # decoupled heads (Qwen3, Gemma)
        positional="rope",
        rope_layout="half",
        norm="rmsnorm",
        norm_position="pre",
        activation="swiglu",
        dropout=dropout,
        attention_dropout=float(c.get("attention_dropout", 0.0)),
        bias=bias,
        qkv_bias=qkv_bias,
        tie_embeddings=c.get("tie_word_embeddings", False),
        norm_eps=c.get("rms_norm_eps", 1e-6),
        pad_token_id=hc._pad(c, vocab),
        qk_norm=arch == QWEN3,
        sliding_window=window,
        window_pattern=pattern,
        fused_qkv=arch == PHI3,
        **rope,
    )


def _windows(c: dict[str, Any], arch: str) -> tuple[int | None, str | None]:
    """(sliding_window, window_pattern). Mistral and Phi-3 window every layer (or none: sliding_window null). Qwen2
    and Qwen3 window only with use_sliding_window, on the layers its layer_types call "sliding_attention" (by
    default those from max_window_layers on), the others attend fully."""
    n = hc._get(c, "num_hidden_layers")
    if arch in ("MistralForCausalLM", PHI3):
        if c.get("layer_types") and set(c["layer_types"]) != {"sliding_attention"} and c.get("sliding_window"):
            raise hc._refuse(arch, "layer_types mixing full and sliding attention (Ministral's; use Qwen3's layout)")
        return c.get("sliding_window"), None
    if arch not in (QWEN2, QWEN3) or not c.get("use_sliding_window", False) or not c.get("sliding_window"):
        return None, None
    return window_layers(
        c, arch, n, ["sliding_attention" if i >= c.get("max_window_layers", 28) else "full_attention" for i in range(n)]
    )


def window_layers(c: dict[str, Any], arch: str, n: int, default: list[str]) -> tuple[int | None, str | None]:
    """``layer_types`` (or ``default``) → ``(sliding_window, window_pattern)``: 'L' per sliding layer, 'G' per full
    one; pattern None when every layer slides, no window when none does."""
    types = c.get("layer_types") or default
    if len(types) != n or set(types) - {"sliding_attention", "full_attention"}:
        raise hc._refuse(arch, f"layer_types {types!r} (expected one of full_attention/sliding_attention per layer)")
    letters = "".join("L" if t == "sliding_attention" else "G" for t in types)
    if "L" not in letters or not c.get("sliding_window"):
        return None, None
    return int(c["sliding_window"]), (None if "G" not in letters else letters)


def _llama_layer(h: str, o: str, cfg: ModelConfig, arch: str) -> list[hc.Entry]:
    qkv_bias = cfg.bias if cfg.qkv_bias is None else cfg.qkv_bias
    rows = hc._norm(f"{h}.input_layernorm", f"{o}.attn_add_norm.norm", False)
    if arch == PHI3:  # fused rows [q (H*Dh) | k (Hkv*Dh) | v (Hkv*Dh)]: our fused qkv_proj's order
        rows += hc._linear(f"{h}.self_attn.qkv_proj", f"{o}.attn.qkv_proj", False)
    else:
        for p in ("q_proj", "k_proj", "v_proj"):  # q/k rows in the "half" RoPE layout
            rows += hc._linear(f"{h}.self_attn.{p}", f"{o}.attn.{p}", qkv_bias)
    rows += hc._linear(f"{h}.self_attn.o_proj", f"{o}.attn.o_proj", cfg.bias)
    if cfg.qk_norm:  # Qwen3: RMSNorm over each head's Dh, weight (Dh,), before RoPE
        rows += hc._norm(f"{h}.self_attn.q_norm", f"{o}.attn.q_norm", False)
        rows += hc._norm(f"{h}.self_attn.k_norm", f"{o}.attn.k_norm", False)
    rows += hc._norm(f"{h}.post_attention_layernorm", f"{o}.ffn_add_norm.norm", False)
    if arch == PHI3:  # gate_up_proj rows [gate (F) | up (F)]: down(silu(gate) * up), split into our two
        rows.append(
            hc._e(f"{h}.mlp.gate_up_proj.weight", (f"{o}.ffn.gate_proj.weight", f"{o}.ffn.up_proj.weight"), "cat")
        )
        rows += hc._linear(f"{h}.mlp.down_proj", f"{o}.ffn.down_proj", False)
    else:
        for p in ("gate_proj", "up_proj", "down_proj"):  # down(silu(gate(x)) * up(x))
            rows += hc._linear(f"{h}.mlp.{p}", f"{o}.ffn.{p}", cfg.bias)
    return rows


def llama_table(cfg: ModelConfig, arch: str) -> list[hc.Entry]:
    return hc.decoder_table(
        cfg,
        "model.embed_tokens.weight",
        "model.layers",
        "model.norm",
        False,
        lambda h, o: _llama_layer(h, o, cfg, arch),
    )


def llama_shape(c: dict[str, Any], vocab: int, max_len: int) -> dict[str, Any]:
    """The fields every Llama-shaped reader (Llama, Mistral, Qwen2, Qwen3, Phi-3, Gemma) sets alike: a decoder LM
    with a vocabulary of ``vocab``, the config's sizes (``max_len``: the family's default length) and its key/value
    heads."""
    return dict(
        architecture="decoder_lm",
        vocab_size=vocab,
        **hc.read_sizes(c, max_len),
        n_kv_heads=c.get("num_key_value_heads") or hc._get(c, "num_attention_heads"),
    )


def llama_sizes(cfg: ModelConfig) -> dict[str, Any]:
    """The sizes every Llama-shaped config.json (Llama, Mistral, Qwen2, Qwen3, Phi-3, Gemma) writes alike."""
    return dict(**hc.hf_sizes(cfg), num_key_value_heads=cfg.kv_heads, head_dim=cfg.dh, rms_norm_eps=cfg.norm_eps)


def llama_write(cfg: ModelConfig, arch: str) -> dict[str, Any]:
    out = dict(
        **llama_sizes(cfg),
        hidden_act="silu",
        attention_bias=cfg.bias,
        mlp_bias=cfg.bias,
        attention_dropout=cfg.attention_dropout,
        tie_word_embeddings=cfg.tie_embeddings,
        rope_parameters=hc.write_rope(cfg),
    )
    if arch in (QWEN2, QWEN3, PHI3, "MistralForCausalLM"):  # no bias fields
        del out["mlp_bias"], out["attention_bias"]
    if arch == QWEN3:
        out.update(attention_bias=False)
    if arch in (QWEN2, QWEN3):
        out.update(use_sliding_window=cfg.sliding_window is not None)
        if cfg.sliding_window is not None:  # the window on the layers cfg.layer_window gives it to
            types = ["sliding_attention" if cfg.layer_window(i) else "full_attention" for i in range(cfg.n_layers)]
            leading_full = next((i for i, t in enumerate(types) if t == "sliding_attention"), cfg.n_layers)
            out.update(sliding_window=cfg.sliding_window, layer_types=types, max_window_layers=leading_full)
    if arch in ("MistralForCausalLM", PHI3):
        out.update(sliding_window=cfg.sliding_window)
    if arch == PHI3:
        out.update(resid_pdrop=cfg.dropout, embd_pdrop=cfg.dropout, pad_token_id=cfg.pad_token_id)
        del out["head_dim"]  # Phi-3's heads split hidden_size
    return out
