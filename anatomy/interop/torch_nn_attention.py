"""The attention half of ``torch_nn.py``: ``nn.MultiheadAttention`` <-> our ``MultiHeadAttention`` (the fused
input projection split in three, rows of D), and the small copying and checking helpers the block and stack
conversions build on."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from anatomy.components.attention import MultiHeadAttention

# ---------------------------------------------------------------------------------------------- small helpers


def like(module: nn.Module) -> dict[str, Any]:
    """``device`` and ``dtype`` of the module's first parameter (empty when it has none)."""
    p = next(module.parameters(), None)
    return {} if p is None else {"device": p.device, "dtype": p.dtype}


def copy_into(dst: torch.Tensor | None, src: torch.Tensor | None, where: str) -> None:
    """Copy ``src`` into ``dst`` in place (never aliasing); both ``None`` is fine, one ``None`` is not."""
    if (dst is None) != (src is None):
        raise ValueError(f"{where}: present on one side only")
    if dst is None or src is None:
        return
    if dst.shape != src.shape:
        raise ValueError(f"{where}: shape {tuple(src.shape)} does not fit {tuple(dst.shape)}")
    with torch.no_grad():
        dst.copy_(src)


def one_bias(where: str, present: list[bool]) -> bool:
    if len(set(present)) != 1:
        raise ValueError(
            f"{where} has bias on some projections or norms and not on others; torch.nn's bias= "
            "switches the Linear and LayerNorm biases together, and so does ours"
        )
    return present[0]


def expect(module: object, cls: type, where: str) -> None:
    if not isinstance(module, cls):
        raise TypeError(f"{where} must be {cls.__module__}.{cls.__name__}, got {type(module).__name__}")


def check_torch_mha(m: nn.MultiheadAttention, where: str) -> bool:
    """Refuse what our attention cannot express; return whether it has biases."""
    d = m.embed_dim
    if m.kdim != d or m.vdim != d:
        raise ValueError(
            f"{where}: kdim={m.kdim}, vdim={m.vdim} differ from embed_dim={d}; our "
            "MultiHeadAttention needs kdim == vdim == d_model"
        )
    if m.bias_k is not None:
        raise ValueError(f"{where}: add_bias_kv=True is not supported (ours has no learned extra key/value)")
    if m.add_zero_attn:
        raise ValueError(f"{where}: add_zero_attn=True is not supported (our attention adds no zero key)")
    return one_bias(where, [m.in_proj_bias is not None, m.out_proj.bias is not None])


def check_ours_mha(a: MultiHeadAttention, where: str) -> bool:
    """Refuse what nn.MultiheadAttention cannot express; return whether it has biases."""
    if a.n_kv_heads != a.n_heads:
        raise ValueError(
            f"{where}: grouped-query attention (GQA, n_kv_heads={a.n_kv_heads} != "
            f"n_heads={a.n_heads}) has no nn.MultiheadAttention equivalent"
        )
    if a.inner_dim != a.d_model:
        raise ValueError(
            f"{where}: heads of width head_dim={a.head_dim} (n_heads * head_dim = {a.inner_dim} != "
            f"d_model = {a.d_model}) have no nn.MultiheadAttention equivalent: its heads split d_model"
        )
    if a.sliding_window is not None:
        raise ValueError(
            f"{where}: sliding-window attention (sliding_window={a.sliding_window}) has no "
            "nn.MultiheadAttention equivalent"
        )
    if a.qk_norm is not None:
        raise ValueError(f"{where}: QK-norm (qk_norm={a.qk_norm!r}) has no nn.MultiheadAttention equivalent")
    if a.positional is not None:
        raise ValueError(
            f"{where}: a positional scheme inside attention ({type(a.positional).__name__}) has "
            "no nn.MultiheadAttention equivalent"
        )
    default = 1.0 / math.sqrt(a.head_dim)
    if not math.isclose(a.scale, default, rel_tol=1e-9):
        raise ValueError(
            f"{where}: non-default attention scale {a.scale:.6g}; nn.MultiheadAttention always "
            f"uses 1/sqrt(Dh) = {default:.6g}"
        )
    projs = [a.qkv_proj, a.o_proj] if a.fused_qkv else [a.q_proj, a.k_proj, a.v_proj, a.o_proj]
    return one_bias(where, [p.bias is not None for p in projs])


def _ours_qkv(a: MultiHeadAttention) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Our q/k/v projections as torch's fused ``in_proj``: weight ``(3D, D)``, bias ``(3D,)`` or ``None``."""
    if a.fused_qkv:
        return a.qkv_proj.weight, a.qkv_proj.bias
    projs = (a.q_proj, a.k_proj, a.v_proj)
    w = torch.cat([p.weight for p in projs])  # (3D, D)
    b = None if projs[0].bias is None else torch.cat([p.bias for p in projs])  # (3D,)
    return w, b


def mha_into_ours(a: MultiHeadAttention, m: nn.MultiheadAttention) -> None:
    if m.in_proj_weight is not None:
        ws = m.in_proj_weight.chunk(3)  # 3 x (D, D)
    else:
        ws = (m.q_proj_weight, m.k_proj_weight, m.v_proj_weight)  # 3 x (D, D)
    bs = (None,) * 3 if m.in_proj_bias is None else m.in_proj_bias.chunk(3)  # 3 x (D,)
    if a.fused_qkv:
        copy_into(a.qkv_proj.weight, torch.cat(ws), "qkv_proj.weight")  # (3D, D)
        copy_into(a.qkv_proj.bias, None if bs[0] is None else torch.cat(bs), "qkv_proj.bias")  # (3D,)
    else:
        for name, w, b in zip(("q_proj", "k_proj", "v_proj"), ws, bs, strict=True):
            copy_into(getattr(a, name).weight, w, f"{name}.weight")
            copy_into(getattr(a, name).bias, b, f"{name}.bias")
    copy_into(a.o_proj.weight, m.out_proj.weight, "o_proj.weight")
    copy_into(a.o_proj.bias, m.out_proj.bias, "o_proj.bias")
    a.dropout = m.dropout


def mha_into_torch(m: nn.MultiheadAttention, a: MultiHeadAttention) -> None:
    w, b = _ours_qkv(a)
    copy_into(m.in_proj_weight, w, "in_proj_weight")
    copy_into(m.in_proj_bias, b, "in_proj_bias")
    copy_into(m.out_proj.weight, a.o_proj.weight, "out_proj.weight")
    copy_into(m.out_proj.bias, a.o_proj.bias, "out_proj.bias")
    m.dropout = a.dropout


def mha_from_torch(m: nn.MultiheadAttention) -> MultiHeadAttention:
    bias = check_torch_mha(m, "nn.MultiheadAttention")
    a = MultiHeadAttention(d_model=m.embed_dim, n_heads=m.num_heads, bias=bias, dropout=m.dropout, kernel="auto")
    mha_into_ours(a.to(**like(m)), m)
    return a


def mha_to_torch(a: MultiHeadAttention) -> nn.MultiheadAttention:
    bias = check_ours_mha(a, "MultiHeadAttention")
    m = nn.MultiheadAttention(a.d_model, a.n_heads, dropout=a.dropout, bias=bias, batch_first=True, **like(a))
    mha_into_torch(m, a)
    return m
