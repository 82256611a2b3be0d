"""TransformerLens's activation names on our models: ``get_act_name`` and the table from its names to our hook points.

    get_act_name("pattern", 0)      # "blocks.0.attn.hook_pattern"
    get_act_name("scale4ln1")       # "blocks.4.ln1.hook_scale"

``tl_points(model)`` says, for every TransformerLens name a model can answer, which of our hook points fires there
and how the layout changes (TransformerLens keeps heads after positions: ``hook_q/k/v/z`` are ``(B, T, H, Dh)``
where ours are ``(B, H, T, Dh)``; its ``ln.hook_scale`` is the norm's divisor ``sqrt(var + eps)``, ours its
reciprocal). A name TransformerLens has but our model cannot match exactly is listed in ``refused`` with the
reason, and asking for it raises that reason: nothing is ever silently different.

Our own names (``stack.blocks.0.attn.hook_z``, ours layouts) stay as they are; TransformerLens names have no
``stack.`` prefix, so the two never collide.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from anatomy.components.norms import RMSNorm

_LAYER_TYPE_ALIAS = {"a": "attn", "m": "mlp", "b": "", "block": "", "blocks": "", "attention": "attn"}
_ACT_NAME_ALIAS = {
    "attn": "pattern",
    "attn_logits": "attn_scores",
    "key": "k",
    "query": "q",
    "value": "v",
    "mlp_pre": "pre",
    "mlp_mid": "mid",
    "mlp_post": "post",
}
_ATTN_NAMES = ("k", "v", "q", "z", "rot_k", "rot_q", "result", "pattern", "attn_scores")
_MLP_NAMES = ("pre", "post", "mid", "pre_linear")


def get_act_name(name: str, layer: int | str | None = None, layer_type: str | None = None) -> str:
    """TransformerLens's ``utils.get_act_name`` rules: a full name is returned as it is; ``"k6"`` is
    ``("k", 6)``, ``"scale4ln1"`` is ``("scale", 4, "ln1")``; aliases (``"attn"`` → pattern, ``"attn_logits"`` →
    attn_scores, ``"key"/"query"/"value"``, ``"mlp_pre"``...); attention and MLP names find their sub-module;
    ``scale``/``normalized`` without a layer are the final norm's."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"get_act_name: name must be a non-empty string, got {name!r}")
    if ("." in name or name.startswith("hook_")) and layer is None and layer_type is None:
        return name
    match = re.match(r"([a-z]+)(\d+)([a-z]?.*)", name)
    if match is not None:
        name, number, rest = match.groups()
        layer, layer_type = int(number), rest
    name = _ACT_NAME_ALIAS.get(name, name)
    full = "" if layer is None else f"blocks.{layer}."
    if name in _ATTN_NAMES:
        layer_type = "attn"
    elif name in _MLP_NAMES:
        layer_type = "mlp"
    elif layer_type in _LAYER_TYPE_ALIAS:
        layer_type = _LAYER_TYPE_ALIAS[layer_type]
    if layer_type:
        full += f"{layer_type}."
    full += f"hook_{name}"
    if name in ("scale", "normalized") and layer is None:
        full = f"ln_final.{full}"
    return full


def heads_last(x: torch.Tensor) -> torch.Tensor:
    """Ours ``(B, H, T, Dh)`` ↔ TransformerLens ``(B, T, H, Dh)``: a view, so an in-place edit reaches the model."""
    return x.transpose(1, 2)  # (B, T, H, Dh)


def reciprocal(x: torch.Tensor) -> torch.Tensor:
    """Our norm scale ``1/sqrt(var + eps)`` ↔ TransformerLens's ``sqrt(var + eps)``."""
    return 1.0 / x


def same(x: torch.Tensor) -> torch.Tensor:
    return x


@dataclass(frozen=True)
class TLPoint:
    """One TransformerLens name on our model: the hook point of ours that fires (``source``), our layout →
    TransformerLens's (``to_tl``) and back (``from_tl``; the identity or a view for a transpose). ``kind``:
    ``"plain"``; ``"unrotated_q"``/``"unrotated_k"`` (a RoPE model's q/k before rotation, projected again from
    the attention input); ``"scores"`` (masked like TransformerLens after our hook, hidden keys -inf); ``"result"``
    (per-head outputs from ``hook_z`` and ``W_O`` of layer ``layer``); ``"mlp_pre:<proj>"`` (computed from the
    FFN input) and ``"normalized"`` (the norm's input ``stream`` centred and scaled, before the norm's weight and
    bias, as TransformerLens's ``hook_normalized``): cache entries only, no hook point of ours carries them."""

    name: str
    source: str
    to_tl: Callable[[torch.Tensor], torch.Tensor] = same
    from_tl: Callable[[torch.Tensor], torch.Tensor] = same
    kind: str = "plain"
    layer: int = -1
    stream: str = ""  # "normalized": the residual the norm reads


CACHE_ONLY = ("mlp_pre", "normalized", "unrotated")  # kinds computed from other hook points: cache entries only
BRIDGE_ALIAS = (
    "the TransformerBridge's component aliases (.hook_in, .hook_out, attn.q.hook_out, hook_unembed...) "
    "are not HookedTransformer names and are not offered; use the hook_* names (blocks.0.hook_resid_pre, "
    "blocks.0.ln1.hook_normalized...)"
)


@dataclass
class TLTable:
    points: dict[str, TLPoint] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)  # TransformerLens name -> why we cannot match it
    why_none: str | None = None  # set when the model has no TransformerLens names at all


@dataclass(frozen=True)
class Parts:
    """Where a model's pieces are: hook-name prefixes, the stack, the output head, and whether it is causal."""

    embed_prefix: str
    prefix: str
    embeddings: Any  # InputEmbeddings (typed loosely: read through nn.Module attributes)
    stack: Any  # TransformerStack
    lm_head: nn.Linear | None
    causal: bool


def model_parts(model: nn.Module) -> Parts | None:
    """One stack of blocks under ``model.stack`` (``DecoderLM``, ``Encoder``) or ``model.encoder.stack``
    (``Classifier``); ``None`` for anything else (an encoder-decoder has two stacks)."""
    if hasattr(model, "stack") and hasattr(model, "embeddings") and hasattr(model.stack, "blocks"):
        lm_head = getattr(model, "lm_head", None)
        decoder_lm = getattr(model, "is_encoder_decoder", None) is False  # DecoderLM (HF's flag; Encoder: None)
        return Parts(
            "embeddings",
            "stack",
            model.embeddings,
            model.stack,
            lm_head if isinstance(lm_head, nn.Linear) else None,
            decoder_lm,
        )
    encoder = getattr(model, "encoder", None)
    if (
        encoder is not None
        and hasattr(encoder, "stack")
        and hasattr(encoder, "embeddings")
        and not hasattr(model, "decoder")
    ):
        return Parts("encoder.embeddings", "encoder.stack", encoder.embeddings, encoder.stack, None, False)
    return None


def _rotary(attn: Any) -> bool:
    from anatomy.components.positional.rope import RotaryPositional

    return isinstance(getattr(attn, "positional", None), RotaryPositional)


def tl_points(model: nn.Module) -> TLTable:
    """Every TransformerLens name ``model`` answers (``points``) and the ones it refuses, with the reason."""
    table = TLTable()
    parts = model_parts(model)
    if parts is None:
        table.why_none = (
            f"{type(model).__name__} has no TransformerLens names: they describe one stack of blocks "
            "(HookedTransformer); use our hook names (anatomy.inspection.hook_names(model))"
        )
        return table
    pts, refused = table.points, table.refused

    def add(name: str, source: str, **kw: Any) -> None:
        pts[name] = TLPoint(name, source, **kw)

    emb = parts.embeddings
    add("hook_embed", f"{parts.embed_prefix}.hook_tokens")
    positional = getattr(emb, "positional", None)
    if positional is not None and getattr(positional, "site", None) == "embedding":
        add("hook_pos_embed", f"{parts.embed_prefix}.hook_pos")
    norm = getattr(emb, "norm", None)
    if norm is not None and hasattr(norm, "hook_scale"):  # BERT: the embeddings' own norm
        add("embed_ln.hook_scale", f"{parts.embed_prefix}.norm.hook_scale", to_tl=reciprocal, from_tl=reciprocal)
        refused["embed_ln.hook_normalized"] = (
            "the embeddings' sum before their norm has no hook point here; use blocks.0.hook_resid_pre (after the norm)"
        )
    if getattr(emb, "token_types", None) is not None or norm is not None:
        pts.pop("hook_embed")
        refused["hook_embed"] = (
            "embeddings with token types or a norm (BERT): TransformerLens 4.3's bridge caches "
            "the whole embedding output (after its norm) under this name, our "
            "blocks.0.hook_resid_pre; the token embedding alone is our embeddings.hook_tokens"
        )
    for i, block in enumerate(parts.stack.blocks):
        p, b = f"{parts.prefix}.blocks.{i}", f"blocks.{i}"
        attn = block.attn
        pre = block.attn_add_norm.placement == "pre" and block.ffn_add_norm.placement == "pre"
        add(f"{b}.hook_resid_pre", f"{p}.hook_resid_pre")
        if pre:
            add(f"{b}.hook_attn_out", f"{p}.hook_attn_out")
        else:
            refused[f"{b}.hook_attn_out"] = (
                "a Post-Norm block (BERT): TransformerLens 4.3's bridge hooks HF's attention module there, whose "
                f"output already holds the residual and the norm (our {p}.hook_resid_mid), where HookedEncoder "
                f"hooked attention alone (our {p}.hook_attn_out); the two disagree, so the name is not answered"
            )
        add(f"{b}.hook_mlp_out", f"{p}.hook_ffn_out")
        add(f"{b}.hook_resid_post", f"{p}.hook_resid_post")
        add(f"{b}.attn.hook_pattern", f"{p}.attn.hook_weights")
        add(f"{b}.attn.hook_z", f"{p}.attn.hook_z", to_tl=heads_last, from_tl=heads_last)
        add(f"{b}.attn.hook_result", f"{p}.attn.hook_out", kind="result", layer=i)
        add(f"{b}.attn.hook_v", f"{p}.attn.hook_v", to_tl=heads_last, from_tl=heads_last)
        qk = ("q", "k")
        if getattr(attn, "qk_norm", None) is not None:
            for n in ("q", "k", "rot_q", "rot_k"):
                refused[f"{b}.attn.hook_{n}"] = (
                    "our hook_q/hook_k come after the QK-norm; TransformerLens's place for them is not matched"
                )
        elif _rotary(attn):
            for n in qk:
                add(f"{b}.attn.hook_rot_{n}", f"{p}.attn.hook_{n}", to_tl=heads_last, from_tl=heads_last)
                add(f"{b}.attn.hook_{n}", f"{p}.hook_attn_in", kind=f"unrotated_{n}", layer=i)
            for n in ("cos", "sin"):
                refused[f"{b}.attn.hook_{n}"] = refused[f"rotary_emb.hook_{n}"] = (
                    "RoPE's cos/sin tables are not offered as activations (anatomy.components.positional.rope)"
                )
        else:
            for n in qk:
                add(f"{b}.attn.hook_{n}", f"{p}.attn.hook_{n}", to_tl=heads_last, from_tl=heads_last)
        if not pre:
            refused[f"{b}.attn.hook_attn_scores"] = (
                "a Post-Norm block (BERT): TransformerLens 4.3's bridge caches the softmaxed pattern under this "
                f"name there; the scores before the softmax are our {p}.attn.hook_scores"
            )
        elif getattr(attn, "sliding_window", None) is not None or getattr(attn, "softcap", None) is not None:
            refused[f"{b}.attn.hook_attn_scores"] = (
                "a windowed or soft-capped attention: our hook_scores are not masked the way TransformerLens masks them"
            )
        else:
            add(f"{b}.attn.hook_attn_scores", f"{p}.attn.hook_scores", kind="scores", layer=i)
        add(f"{b}.mlp.hook_post", f"{p}.ffn.hook_hidden")
        if getattr(block.ffn, "gated", False):  # TransformerLens: hook_pre before the gate's activation
            add(f"{b}.mlp.hook_pre", f"{p}.hook_ffn_in", kind="mlp_pre:gate_proj", layer=i)
            add(f"{b}.mlp.hook_pre_linear", f"{p}.hook_ffn_in", kind="mlp_pre:up_proj", layer=i)
        else:
            add(f"{b}.mlp.hook_pre", f"{p}.hook_ffn_in", kind="mlp_pre:up_proj", layer=i)
        if pre and not block.parallel_residual:
            add(f"{b}.hook_resid_mid", f"{p}.hook_resid_mid")
        else:
            refused[f"{b}.hook_resid_mid"] = (
                "a Post-Norm or parallel block: TransformerLens's resid_mid (the sum "
                f"before ln2) is not our {p}.hook_resid_mid"
            )
        if pre:
            for ln, norm in (("ln1", "attn_add_norm"), ("ln2", "ffn_add_norm")):
                add(f"{b}.{ln}.hook_scale", f"{p}.{norm}.norm.hook_scale", to_tl=reciprocal, from_tl=reciprocal)
            mid = f"{p}.hook_resid_pre" if block.parallel_residual else f"{p}.hook_resid_mid"
            add(
                f"{b}.ln1.hook_normalized",
                f"{p}.attn_add_norm.norm.hook_scale",
                kind="normalized",
                stream=f"{p}.hook_resid_pre",
                layer=i,
            )
            add(f"{b}.ln2.hook_normalized", f"{p}.ffn_add_norm.norm.hook_scale", kind="normalized", stream=mid, layer=i)
        else:  # Post-Norm (BERT): ln1/ln2 are the norms after each residual add, as in TransformerLens's encoder
            for ln, norm in (("ln1", "attn_add_norm"), ("ln2", "ffn_add_norm")):
                add(f"{b}.{ln}.hook_scale", f"{p}.{norm}.norm.hook_scale", to_tl=reciprocal, from_tl=reciprocal)
                refused[f"{b}.{ln}.hook_normalized"] = (
                    "a Post-Norm block: the sum the norm reads has no hook point "
                    f"here; the norm's output is our {p}.hook_resid_"
                    f"{'mid' if ln == 'ln1' else 'post'}"
                )
        split = (
            "TransformerLens's per-head/split inputs (use_attn_in, use_split_qkv_input, use_hook_mlp_in) are not "
            f"offered; use {b}.ln1.hook_normalized (cache) or {b}.hook_resid_pre"
        )
        for n in ("attn_in", "q_input", "k_input", "v_input", "mlp_in"):
            refused[f"{b}.hook_{n}"] = split
        for n in ("attn_in", "q_input", "k_input", "v_input"):  # the bridge's copies inside the attention
            refused[f"{b}.attn.hook_{n}"] = split
    final = parts.stack.final_norm
    if final is None:
        for n in ("scale", "normalized"):
            refused[f"ln_final.hook_{n}"] = (
                "the model has no final norm (Post-Norm blocks end in their own norm; "
                "TransformerLens's BERT ln_final is its MLM head's norm, which an "
                "Encoder does not have)"
            )
    elif hasattr(final, "hook_scale"):
        add("ln_final.hook_scale", f"{parts.prefix}.final_norm.hook_scale", to_tl=reciprocal, from_tl=reciprocal)
        last = f"{parts.prefix}.blocks.{len(parts.stack.blocks) - 1}.hook_resid_post"
        add("ln_final.hook_normalized", f"{parts.prefix}.final_norm.hook_scale", kind="normalized", stream=last)
    return table


def norm_kind(model: nn.Module) -> str:
    """``"RMS"`` or ``"LN"`` for the blocks' norm, as TransformerLens's ``cfg.normalization_type``."""
    parts = model_parts(model)
    if parts is None or not len(parts.stack.blocks):
        return "LN"
    return "RMS" if isinstance(parts.stack.blocks[0].attn_add_norm.norm, RMSNorm) else "LN"
