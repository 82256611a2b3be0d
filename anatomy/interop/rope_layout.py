"""Moving a RoPE checkpoint between the ``"half"`` and ``"interleaved"`` layouts (docs/conventions.md, "RoPE layouts").

Both layouts rotate pair ``i`` by ``p * theta_i``; they differ only in *where* the two coordinates of pair ``i``
sit inside a head vector of width ``Dh``:

==================  ============================  ==========================================
``"half"``          ``(i, i + Dh/2)``              Hugging Face Llama, GPT-NeoX
``"interleaved"``   ``(2i, 2i + 1)``               Meta's original Llama, GPT-J, RoFormer
==================  ============================  ==========================================

So an interleaved head vector is the half-layout vector with its coordinates permuted::

    interleaved[2i] = half[i]        interleaved[2i + 1] = half[i + Dh/2]        i = 0 .. Dh/2 - 1

q and k are linear in the input, so permuting the *output rows* of ``W_q`` and ``W_k`` (and their biases), head by
head, moves a whole checkpoint from one layout to the other. Scores are sums over pairs, ``q . k`` is unchanged, and
``v``, ``o`` and the FFN are untouched: the converted model computes the same function (up to float rounding in the
rotation). This is the permutation Hugging Face's ``convert_llama_weights_to_hf.py`` applies to Meta's checkpoints.
Only self-attention is rotated; cross-attention projections are left alone.
"""

from __future__ import annotations

import re

import torch
from torch import nn

from anatomy.components.positional import ROPE_LAYOUTS
from anatomy.config import ModelConfig
from anatomy.shapes import check_choice

# Self-attention q/k projections in our state-dict vocabulary; "cross_attn." does not match (no "." before "attn").
_QK_KEY = re.compile(r"(^|\.)attn\.(q_proj|k_proj|qkv_proj|q_norm|k_norm)\.(weight|bias)$")


def layout_permutation(head_dim: int, source: str, target: str) -> torch.Tensor:
    """Index ``perm`` with ``head_target = head_source[perm]`` for one head of width ``Dh``."""
    check_choice("source layout", source, ROPE_LAYOUTS)
    check_choice("target layout", target, ROPE_LAYOUTS)
    if head_dim % 2:
        raise ValueError(f"RoPE needs an even head dimension, got head_dim={head_dim}")
    half = head_dim // 2
    if source == target:
        return torch.arange(head_dim)
    to_interleaved = torch.stack([torch.arange(half), torch.arange(half) + half], dim=-1).flatten()  # 0, h, 1, h+1..
    if target == "interleaved":
        return to_interleaved
    return torch.argsort(to_interleaved)  # the inverse: 0, 2, 4, ..., 1, 3, 5, ...


def permute_heads(rows: torch.Tensor, n_heads: int, head_dim: int, source: str, target: str) -> torch.Tensor:
    """Permute the rows ``(n_heads * Dh, ...)`` of a q or k projection (weight or bias) head by head."""
    if rows.shape[0] != n_heads * head_dim:
        raise ValueError(
            f"expected {n_heads} heads x {head_dim} = {n_heads * head_dim} rows, got shape {tuple(rows.shape)}"
        )
    perm = layout_permutation(head_dim, source, target).to(rows.device)
    per_head = rows.reshape(n_heads, head_dim, *rows.shape[1:])  # (H, Dh, ...)
    return per_head[:, perm].reshape(rows.shape)  # (H * Dh, ...)


def convert_state_dict(
    state_dict: dict[str, torch.Tensor], config: ModelConfig, target: str
) -> dict[str, torch.Tensor]:
    """Our state dict in ``config.rope_layout`` → the same weights for ``target``. Other keys are passed through."""
    check_choice("rope_layout", target, ROPE_LAYOUTS)
    if config.positional != "rope":
        raise ValueError(f"RoPE layout conversion needs positional='rope', got positional={config.positional!r}")
    source, dh, h, hkv = config.rope_layout, config.dh, config.n_heads, config.kv_heads
    if config.rope_fraction != 1.0 and source != target:
        raise ValueError(
            f"RoPE layout conversion of a partial-rotary model (rope_fraction={config.rope_fraction}) "
            "is not supported: only the first rotary_dim dims of each head would move"
        )
    out = {}
    for key, value in state_dict.items():
        match = _QK_KEY.search(key)
        if match is None or source == target:
            out[key] = value
            continue
        proj = match.group(2)
        if proj in ("q_norm", "k_norm"):  # QK-norm: one (Dh,) weight over each head's dims, permuted like them
            out[key] = permute_heads(value, 1, dh, source, target)
        elif proj == "q_proj":
            out[key] = permute_heads(value, h, dh, source, target)
        elif proj == "k_proj":
            out[key] = permute_heads(value, hkv, dh, source, target)
        else:  # fused rows [q (H*Dh) | k (Hkv*Dh) | v (Hkv*Dh)]: v is not rotated
            q, k, v = value.split([h * dh, hkv * dh, hkv * dh], dim=0)  # type: ignore[no-untyped-call]  # torch's Tensor.split is unannotated
            out[key] = torch.cat(
                [permute_heads(q, h, dh, source, target), permute_heads(k, hkv, dh, source, target), v], dim=0
            )
    return out


def convert_rope_layout(model: nn.Module, layout: str) -> nn.Module:
    """A new model with ``config.rope_layout = layout`` and the q/k rows permuted: the same function as ``model``."""
    from anatomy.models import build_model

    config = getattr(model, "config", None)
    if not isinstance(config, ModelConfig):
        raise TypeError(f"model must be built by anatomy.build_model (it carries .config), got {type(model).__name__}")
    state = convert_state_dict(model.state_dict(), config, layout)
    new = build_model(config.replace(rope_layout=layout))
    dtype = next(model.parameters()).dtype
    new.to(dtype).load_state_dict(state)
    return new.train(model.training)
