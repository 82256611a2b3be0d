"""The layer half of ``torch_nn.py``: ``nn.TransformerEncoderLayer`` / ``nn.TransformerDecoderLayer`` <-> our
``EncoderBlock`` / ``DecoderBlock`` (the key tables ``ENCODER_LAYER_KEYS`` and ``DECODER_LAYER_KEYS``; the
attention inside goes through ``torch_nn_attention``), and the checks that refuse what the other side cannot
express."""

from __future__ import annotations

from typing import Any, cast

import torch.nn.functional as F
from torch import nn

from anatomy.components.block import DecoderBlock, EncoderBlock
from anatomy.components.ffn import FeedForward
from anatomy.components.norms import LayerNorm
from anatomy.interop.torch_nn_attention import (
    check_ours_mha,
    check_torch_mha,
    copy_into,
    expect,
    like,
    mha_into_ours,
    mha_into_torch,
    one_bias,
)

ENCODER_LAYER_KEYS = (
    ("self_attn", "attn"),
    ("linear1", "ffn.up_proj"),
    ("linear2", "ffn.down_proj"),
    ("norm1", "attn_add_norm.norm"),
    ("norm2", "ffn_add_norm.norm"),
    ("dropout1", "attn_add_norm.dropout"),
    ("dropout", "ffn.dropout"),
    ("dropout2", "ffn_add_norm.dropout"),
)
DECODER_LAYER_KEYS = (
    ("self_attn", "attn"),
    ("multihead_attn", "cross_attn"),
    ("linear1", "ffn.up_proj"),
    ("linear2", "ffn.down_proj"),
    ("norm1", "attn_add_norm.norm"),
    ("norm2", "cross_add_norm.norm"),
    ("norm3", "ffn_add_norm.norm"),
    ("dropout1", "attn_add_norm.dropout"),
    ("dropout2", "cross_add_norm.dropout"),
    ("dropout", "ffn.dropout"),
    ("dropout3", "ffn_add_norm.dropout"),
)
_ACTIVATIONS = ("relu", "gelu")


def activation_name(act: object) -> str:
    """torch layer's ``activation`` (function or module) → our activation name."""
    if act is F.relu or isinstance(act, nn.ReLU):
        return "relu"
    if act is F.gelu or (isinstance(act, nn.GELU) and act.approximate == "none"):
        return "gelu"
    raise ValueError(
        f"unsupported activation {act!r}: only relu and gelu convert "
        "(F.relu, F.gelu, nn.ReLU(), nn.GELU(), or the strings 'relu' / 'gelu')"
    )


def transfer(layer: nn.Module, block: nn.Module, keys: tuple[tuple[str, str], ...], *, to_ours: bool) -> None:
    """Copy every ``(torch name, our name)`` pair of ``keys`` from one side to the other."""
    for torch_name, our_name in keys:
        t: Any = layer.get_submodule(torch_name)
        o: Any = block.get_submodule(our_name)
        src, dst = (t, o) if to_ours else (o, t)
        where = f"{torch_name} / {our_name}"
        if isinstance(t, nn.MultiheadAttention) and to_ours:
            mha_into_ours(o, t)
        elif isinstance(t, nn.MultiheadAttention):
            mha_into_torch(t, o)
        elif isinstance(t, nn.Dropout):
            dst.p = src.p
        else:  # nn.Linear or a LayerNorm: weight, bias (and eps) on both sides
            if getattr(t, "weight", True) is not None:  # nn.LayerNorm(elementwise_affine=False): ours stays 1
                copy_into(dst.weight, src.weight, f"{where}.weight")
            copy_into(dst.bias, src.bias, f"{where}.bias")
            if hasattr(src, "eps"):
                dst.eps = src.eps


def check_torch_norm(norm: object, d_model: int, where: str) -> nn.LayerNorm:
    if not isinstance(norm, nn.LayerNorm):
        raise ValueError(f"{where}: {type(norm).__name__} is not an nn.LayerNorm and cannot convert")
    if tuple(norm.normalized_shape) != (d_model,):
        raise ValueError(f"{where}: LayerNorm over {tuple(norm.normalized_shape)}, expected ({d_model},)")
    return norm


def _block_kwargs_from_torch(layer: Any, attns: list[nn.MultiheadAttention], norms: list[Any]) -> dict[str, Any]:
    """``EncoderBlock.build`` / ``DecoderBlock.build`` arguments for a torch layer (after checking it)."""
    where = type(layer).__name__
    d = attns[0].embed_dim
    biases = [check_torch_mha(m, where) for m in attns]
    biases += [check_torch_norm(n, d, where).bias is not None for n in norms]
    biases += [layer.linear1.bias is not None, layer.linear2.bias is not None]
    return dict(
        d_model=d,
        n_heads=attns[0].num_heads,
        d_ff=layer.linear1.out_features,
        activation=activation_name(layer.activation),
        norm="layernorm",
        norm_eps=norms[0].eps,
        placement="pre" if layer.norm_first else "post",
        bias=one_bias(where, biases),
        dropout=layer.dropout1.p,
        attention_dropout=attns[0].dropout,
        kernel="auto",
    )


def encoder_layer_from_torch(layer: nn.TransformerEncoderLayer) -> EncoderBlock:
    expect(layer, nn.TransformerEncoderLayer, "encoder layer")
    kw = _block_kwargs_from_torch(layer, [layer.self_attn], [layer.norm1, layer.norm2])
    block = cast(EncoderBlock, EncoderBlock.build(**kw)).to(**like(layer))  # build makes an instance of cls
    transfer(layer, block, ENCODER_LAYER_KEYS, to_ours=True)
    return block


def decoder_layer_from_torch(layer: nn.TransformerDecoderLayer) -> DecoderBlock:
    expect(layer, nn.TransformerDecoderLayer, "decoder layer")
    kw = _block_kwargs_from_torch(
        layer, [layer.self_attn, layer.multihead_attn], [layer.norm1, layer.norm2, layer.norm3]
    )
    block = cast(DecoderBlock, DecoderBlock.build(**kw)).to(**like(layer))  # build makes an instance of cls
    transfer(layer, block, DECODER_LAYER_KEYS, to_ours=True)
    return block


def check_ours_norm(norm: object, where: str) -> nn.Module:
    if not isinstance(norm, (LayerNorm, nn.LayerNorm)):
        raise ValueError(
            f"{where}: {type(norm).__name__} has no torch.nn Transformer equivalent (torch.nn's layers use LayerNorm)"
        )
    return norm


def _layer_kwargs_to_torch(block: nn.Module, attns: list[Any], add_norms: list[Any]) -> dict[str, Any]:
    """``nn.TransformerEncoderLayer`` / ``nn.TransformerDecoderLayer`` arguments for our block (checked)."""
    where = type(block).__name__
    placements = sorted({a.placement for a in add_norms})
    if placements not in (["post"], ["pre"]):
        raise ValueError(
            f"{where}: norm placement {', '.join(placements)} has no torch.nn equivalent "
            "(only 'post', norm_first=False, and 'pre', norm_first=True)"
        )
    ffn = block.ffn
    activation = getattr(ffn, "activation", type(ffn).__name__)
    if not isinstance(ffn, FeedForward) or activation not in _ACTIVATIONS:
        raise ValueError(
            f"{where}: activation {activation!r} has no torch.nn equivalent (only relu and "
            "gelu; gated FFNs such as swiglu have a third matrix)"
        )
    norms = [check_ours_norm(a.norm, where) for a in add_norms]
    biases = [check_ours_mha(a, where) for a in attns] + [n.bias is not None for n in norms]
    biases += [ffn.up_proj.bias is not None, ffn.down_proj.bias is not None]
    return dict(
        d_model=attns[0].d_model,
        nhead=attns[0].n_heads,
        dim_feedforward=ffn.d_ff,
        dropout=add_norms[0].dropout.p,
        activation=activation,
        layer_norm_eps=norms[0].eps,
        norm_first=placements == ["pre"],
        bias=one_bias(where, biases),
    )


def encoder_block_to_torch(block: EncoderBlock) -> nn.TransformerEncoderLayer:
    kw = _layer_kwargs_to_torch(block, [block.attn], [block.attn_add_norm, block.ffn_add_norm])
    layer = nn.TransformerEncoderLayer(**kw, batch_first=True, **like(block))
    transfer(layer, block, ENCODER_LAYER_KEYS, to_ours=False)
    return layer


def decoder_block_to_torch(block: DecoderBlock) -> nn.TransformerDecoderLayer:
    kw = _layer_kwargs_to_torch(
        block, [block.attn, block.cross_attn], [block.attn_add_norm, block.cross_add_norm, block.ffn_add_norm]
    )
    layer = nn.TransformerDecoderLayer(**kw, batch_first=True, **like(block))
    transfer(layer, block, DECODER_LAYER_KEYS, to_ours=False)
    return layer
