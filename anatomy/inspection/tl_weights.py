"""TransformerLens's weight names in its shapes, read from our parameters (``model.W_Q`` and friends).

=========  ==============================  ====================================================
name       shape                           ours
=========  ==============================  ====================================================
W_E        (V, D)                          ``embed_tokens.weight``
W_pos      (max_seq_len, D)                the learned positions table (learned positions only)
W_Q        (L, H, D, Dh)                   ``q_proj.weight`` (or the q rows of ``qkv_proj``), per head
W_K, W_V   (L, Hkv, D, Dh)                 one per key/value head (GQA: Hkv < H), as TransformerLens 4
W_O        (L, H, Dh, D)                   ``o_proj.weight``, per head
b_Q        (L, H, Dh); b_K, b_V likewise   refused (ValueError) where the layers have no bias, as TransformerLens
b_O        (L, D)
W_in       (L, D, F); W_gate (gated FFN)   ``up_proj`` / ``gate_proj``
W_out      (L, F, D)                       ``down_proj``
b_in, b_out  (L, F), (L, D)
W_U        (D, V); b_U (V,)                ``lm_head`` (zeros for b_U without a bias)
=========  ==============================  ====================================================

These are new tensors computed from the parameters (gradients flow back to them), not the parameters.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from anatomy.inspection.tl_names import Parts, model_parts

WEIGHT_NAMES = (
    "W_E",
    "W_pos",
    "W_Q",
    "W_K",
    "W_V",
    "W_O",
    "b_Q",
    "b_K",
    "b_V",
    "b_O",
    "W_in",
    "W_gate",
    "W_out",
    "b_in",
    "b_out",
    "W_U",
    "b_U",
)


def _parts(model: nn.Module, name: str) -> Parts:
    parts = model_parts(model)
    if parts is None:
        raise ValueError(
            f"{name}: {type(model).__name__} has no single stack of blocks (TransformerLens's weight "
            "names describe one; read the parameters by their own names)"
        )
    return parts


def _qkv(attn: Any, which: str) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(weight (out, D), bias or None)`` of the q, k or v projection, fused or not."""
    if getattr(attn, "fused_qkv", False):
        inner, kv = attn.inner_dim, attn.n_kv_heads * attn.head_dim
        lo, hi = {"q": (0, inner), "k": (inner, inner + kv), "v": (inner + kv, inner + 2 * kv)}[which]
        bias = attn.qkv_proj.bias
        return attn.qkv_proj.weight[lo:hi], None if bias is None else bias[lo:hi]
    proj = getattr(attn, f"{which}_proj")
    return proj.weight, proj.bias


def heads_in(attn: Any, which: str) -> tuple[torch.Tensor, torch.Tensor]:
    """``W (H|Hkv, D, Dh)`` and ``b (H|Hkv, Dh)`` (zeros without a bias) of q, k or v."""
    w, b = _qkv(attn, which)
    heads = attn.n_heads if which == "q" else attn.n_kv_heads
    dh = attn.head_dim
    w = w.reshape(heads, dh, w.shape[-1]).transpose(1, 2)  # (H|Hkv, D, Dh)
    bias = torch.zeros(heads, dh, dtype=w.dtype, device=w.device) if b is None else b.reshape(heads, dh)
    return w, bias


def w_o(attn: Any) -> torch.Tensor:
    """``(H, Dh, D)``: the rows of ``o_proj`` each head writes through."""
    w: torch.Tensor = attn.o_proj.weight  # (D, H·Dh)
    return w.T.reshape(attn.n_heads, attn.head_dim, w.shape[0])  # (H, Dh, D)


def _bias(linear: nn.Linear) -> torch.Tensor:
    w = linear.weight
    return torch.zeros(w.shape[0], dtype=w.dtype, device=w.device) if linear.bias is None else linear.bias


def _need_bias(blocks: list[nn.Module], name: str) -> None:
    """TransformerLens refuses a bias the checkpoint does not have; so do we (b_U excepted: zeros, as there)."""

    def has(block: Any) -> bool:
        if name in ("b_Q", "b_K", "b_V"):
            return _qkv(block.attn, name[-1].lower())[1] is not None
        if name == "b_O":
            return block.attn.o_proj.bias is not None
        return (block.ffn.up_proj if name == "b_in" else block.ffn.down_proj).bias is not None

    if not all(has(b) for b in blocks):
        raise ValueError(
            f"{name}: this model's layers have no such bias (bias-free projections), as "
            "TransformerLens says for the same checkpoint"
        )


def tl_weight(model: nn.Module, name: str) -> torch.Tensor:
    """The TransformerLens weight ``name`` of ``model`` (see the module's table)."""
    if name not in WEIGHT_NAMES:
        raise ValueError(f"unknown TransformerLens weight {name!r}; valid names: {', '.join(WEIGHT_NAMES)}")
    parts = _parts(model, name)
    blocks = list(parts.stack.blocks)
    if name == "W_E":
        embed: torch.Tensor = parts.embeddings.embed_tokens.weight
        return embed
    if name == "W_pos":
        pos = getattr(parts.embeddings, "positional", None)
        table: torch.Tensor | None = getattr(pos, "weight", None)
        if table is None:
            raise ValueError(
                f"W_pos: {type(model).__name__} has no learned positions table (its positions: {type(pos).__name__})"
            )
        return table
    if name in ("W_U", "b_U"):
        if parts.lm_head is None:
            raise ValueError(f"{name}: {type(model).__name__} has no unembedding (lm_head)")
        return parts.lm_head.weight.T if name == "W_U" else _bias(parts.lm_head)
    if name in ("b_Q", "b_K", "b_V", "b_O", "b_in", "b_out"):
        _need_bias(blocks, name)
    if name in ("W_Q", "W_K", "W_V", "b_Q", "b_K", "b_V"):
        pick = 0 if name[0] == "W" else 1
        return torch.stack([heads_in(b.attn, name[-1].lower())[pick] for b in blocks])  # (L, H|Hkv, D, Dh) | ..Dh)
    if name == "W_O":
        return torch.stack([w_o(b.attn) for b in blocks])  # (L, H, Dh, D)
    if name == "b_O":
        return torch.stack([_bias(b.attn.o_proj) for b in blocks])  # (L, D)
    if name == "W_gate" and not all(getattr(b.ffn, "gated", False) for b in blocks):
        raise ValueError("W_gate: the model's FFN is not gated")
    linear = {"W_in": "up_proj", "b_in": "up_proj", "W_gate": "gate_proj", "W_out": "down_proj", "b_out": "down_proj"}[
        name
    ]
    mods = [getattr(b.ffn, linear) for b in blocks]
    if name.startswith("W_"):
        return torch.stack([m.weight.T for m in mods])  # (L, D, F) | (L, F, D)
    return torch.stack([_bias(m) for m in mods])  # (L, F) | (L, D)
