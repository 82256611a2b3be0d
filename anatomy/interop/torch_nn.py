"""Convert between ``torch.nn``'s Transformer modules and ours, by copying weights (storage is never shared).

``from_torch(module)`` and ``to_torch(module)`` map, in either direction::

    nn.MultiheadAttention          MultiHeadAttention        (anatomy.components)
    nn.TransformerEncoderLayer     EncoderBlock
    nn.TransformerDecoderLayer     DecoderBlock
    nn.TransformerEncoder          EncoderStack              (anatomy.models)
    nn.TransformerDecoder          DecoderStack
    nn.Transformer                 EncoderDecoderStack

Ours is always batch first; ``to_torch`` returns torch modules with ``batch_first=True``. A torch module
built with ``batch_first=False`` converts all the same: transpose its ``(T, B, D)`` inputs to ``(B, T, D)``.
The result has the source's train/eval mode, device and dtype.

Key tables (torch name → our name)
----------------------------------
``nn.MultiheadAttention`` → ``MultiHeadAttention`` (the fused input projection is split in three, rows of D)::

    in_proj_weight[0:D]     in_proj_bias[0:D]       → q_proj.weight, q_proj.bias
    in_proj_weight[D:2D]    in_proj_bias[D:2D]      → k_proj.weight, k_proj.bias
    in_proj_weight[2D:3D]   in_proj_bias[2D:3D]     → v_proj.weight, v_proj.bias
    out_proj.weight         out_proj.bias           → o_proj.weight, o_proj.bias
    num_heads, dropout                              → n_heads, dropout

``nn.TransformerEncoderLayer`` → ``EncoderBlock`` (``ENCODER_LAYER_KEYS``)::

    self_attn.*  → attn.*  (table above)       norm_first  → placement "pre" (True) / "post" (False)
    linear1      → ffn.up_proj                 activation  → ffn.activation "relu" | "gelu"
    linear2      → ffn.down_proj               dropout1    → attn_add_norm.dropout
    norm1        → attn_add_norm.norm          dropout     → ffn.dropout
    norm2        → ffn_add_norm.norm           dropout2    → ffn_add_norm.dropout

``nn.TransformerDecoderLayer`` → ``DecoderBlock`` (``DECODER_LAYER_KEYS``)::

    self_attn       → attn             norm1  → attn_add_norm.norm     dropout1 → attn_add_norm.dropout
    multihead_attn  → cross_attn       norm2  → cross_add_norm.norm    dropout2 → cross_add_norm.dropout
    linear1         → ffn.up_proj      norm3  → ffn_add_norm.norm      dropout3 → ffn_add_norm.dropout
    linear2         → ffn.down_proj                                    dropout  → ffn.dropout

Stacks: ``layers.{i}`` → ``blocks.{i}``, ``norm`` → ``final_norm``; ``nn.Transformer``: ``encoder`` →
``encoder``, ``decoder`` → ``decoder``. torch.nn's ``bias=False`` removes the Linear *and* the LayerNorm
biases; ours follows the same single switch, and a module that mixes the two is refused in both directions.

Masks: the one place where the sense flips
------------------------------------------
torch.nn's masks say True = *ignore* (or are additive floats); ours say True = *may attend*.
``anatomy.components.masks.from_torch_nn`` / ``to_torch_nn`` flip them. Our layers take their masks in one
form, a context: ``attention_inputs`` (``anatomy.components``) builds it from the key-padding mask ``(B, S)`` and the
attention mask, apart as torch takes them. With ``flip = from_torch_nn`` and ``inputs = attention_inputs``::

    torch  mha(x, c, c, key_padding_mask=kpm, attn_mask=am)
    ours   attn(x, inputs(attn, x, c, key_padding_mask=flip(kpm), mask=flip(am)), context=c)   # c=None: self
    torch  enc_layer(x, src_mask=am, src_key_padding_mask=kpm)
    ours   block(x, ctx=inputs(block, x, mask=flip(am), key_padding_mask=flip(kpm)))
    torch  dec_layer(y, mem, tgt_mask=causal, tgt_key_padding_mask=tkpm, memory_key_padding_mask=mkpm)
    ours   block(y, mem, inputs(block, y, mem, key_padding_mask=flip(tkpm), memory_key_padding_mask=flip(mkpm)))
    torch  encoder(x, mask=am, src_key_padding_mask=kpm)
    ours   stack(x, ctx=inputs(stack, x, key_padding_mask=flip(kpm), mask=flip(am)))
    torch  transformer(x, y, tgt_mask=causal, src_key_padding_mask=skpm, tgt_key_padding_mask=tkpm,
                       memory_key_padding_mask=mkpm)
    ours   stack(x, y, src_key_padding_mask=flip(skpm), tgt_key_padding_mask=flip(tkpm),
                 memory_key_padding_mask=flip(mkpm), tgt_is_causal=True)              # torch's names, as torch

Ours reads keys and values from one tensor (``context``), so a torch call with ``key is not value`` has no
equivalent call. A torch 3-D ``attn_mask`` is ``(B*H, T, S)``: view it as ``(B, H, T, S)`` before flipping.
A query row that may attend to nothing gives NaN in some torch paths; ours gives weights 0 and a zero
attention output (so ``o_proj``'s bias alone). In eval mode torch's nested-tensor fast path writes zeros at
padded positions; ``to_torch`` builds ``nn.TransformerEncoder(enable_nested_tensor=False)``, so every position
matches (compare real tokens only when the torch side came with nested tensors on).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from torch import nn

from anatomy.components.attention import MultiHeadAttention
from anatomy.components.block import DecoderBlock, EncoderBlock
from anatomy.components.norms import LayerNorm
from anatomy.interop.torch_nn_attention import expect, like, mha_from_torch, mha_to_torch
from anatomy.interop.torch_nn_layers import (
    DECODER_LAYER_KEYS,
    ENCODER_LAYER_KEYS,
    activation_name,
    check_ours_norm,
    check_torch_norm,
    decoder_block_to_torch,
    decoder_layer_from_torch,
    encoder_block_to_torch,
    encoder_layer_from_torch,
    transfer,
)
from anatomy.models.decoder import DecoderStack
from anatomy.models.encoder import EncoderStack
from anatomy.models.seq2seq import EncoderDecoderStack

__all__ = ["DECODER_LAYER_KEYS", "ENCODER_LAYER_KEYS", "from_torch", "to_torch"]

_Stack = TypeVar("_Stack", EncoderStack, DecoderStack)


# ---------------------------------------------------------------------------------------------- stacks


def _norm_from_torch(norm: Any, d_model: int, where: str) -> LayerNorm | None:
    if norm is None:
        return None
    check_torch_norm(norm, d_model, where)
    ours = LayerNorm(d_model, eps=norm.eps, bias=norm.bias is not None).to(**like(norm))
    transfer(norm, ours, (("", ""),), to_ours=True)
    return ours


def _norm_to_torch(norm: Any, where: str) -> nn.LayerNorm | None:
    if norm is None:
        return None
    check_ours_norm(norm, where)
    out = nn.LayerNorm(norm.weight.shape[0], eps=norm.eps, bias=norm.bias is not None, **like(norm))
    transfer(out, norm, (("", ""),), to_ours=False)
    return out


def _stack_from_torch(
    stack: Any, torch_cls: type[nn.Module], layer_fn: Callable[[Any], EncoderBlock | DecoderBlock], cls: type[_Stack]
) -> _Stack:
    expect(stack, torch_cls, torch_cls.__name__)
    if not len(stack.layers):
        raise ValueError(f"{torch_cls.__name__} has no layers; nothing to take d_model from")
    blocks = [layer_fn(layer) for layer in stack.layers]
    norm = _norm_from_torch(stack.norm, blocks[0].attn.d_model, f"{torch_cls.__name__}.norm")
    return cls(blocks=blocks, final_norm=norm)


def _encoder_from_torch(stack: nn.TransformerEncoder) -> EncoderStack:
    return _stack_from_torch(stack, nn.TransformerEncoder, encoder_layer_from_torch, EncoderStack)


def _decoder_from_torch(stack: nn.TransformerDecoder) -> DecoderStack:
    return _stack_from_torch(stack, nn.TransformerDecoder, decoder_layer_from_torch, DecoderStack)


def _seq2seq_from_torch(t: nn.Transformer) -> EncoderDecoderStack:
    return EncoderDecoderStack(encoder=_encoder_from_torch(t.encoder), decoder=_decoder_from_torch(t.decoder))


def _stack_layers_to_torch(stack: Any, block_fn: Callable[[Any], nn.Module], block_cls: type[nn.Module]) -> list[Any]:
    """Convert each block, refusing a stack whose blocks differ (torch.nn's stacks clone one layer)."""
    where = type(stack).__name__
    if stack.position_bias is not None:
        raise ValueError(
            f"{where}: a shared score bias ({type(stack.position_bias).__name__}) has no torch.nn equivalent"
        )
    if not len(stack.blocks):
        raise ValueError(f"{where} has no blocks; torch.nn needs at least one layer to take its shape from")
    layers = []
    for i, block in enumerate(stack.blocks):
        expect(block, block_cls, f"{where}.blocks[{i}]")
        layers.append(block_fn(block))
    _check_same_config(layers, where)
    return layers


def _layer_config(layer: Any) -> dict[str, Any]:
    """What torch.nn's layer constructor fixes; the blocks of one stack must agree on it."""
    attn, ffn = layer.self_attn, layer.linear1
    return {
        "d_model": attn.embed_dim,
        "nhead": attn.num_heads,
        "dim_feedforward": ffn.out_features,
        "activation": activation_name(layer.activation),
        "norm_first": layer.norm_first,
        "bias": ffn.bias is not None,
        "layer_norm_eps": layer.norm1.eps,
        "dropout": layer.dropout1.p,
    }


def _check_same_config(layers: list[nn.Module], where: str) -> None:
    first = _layer_config(layers[0])
    for i, layer in enumerate(layers[1:], start=1):
        diff = {k: (first[k], v) for k, v in _layer_config(layer).items() if first[k] != v}
        if diff:
            said = ", ".join(f"{k} ({a!r} vs {b!r})" for k, (a, b) in diff.items())
            raise ValueError(
                f"{where}: block {i} differs from block 0 in {said}; torch.nn's stacks clone one layer config"
            )


def _encoder_stack_to_torch(stack: EncoderStack) -> nn.TransformerEncoder:
    layers = _stack_layers_to_torch(stack, encoder_block_to_torch, EncoderBlock)
    norm = _norm_to_torch(stack.final_norm, "EncoderStack.final_norm")
    # no nested tensors: they would write zeros at padded positions, where ours computes them like any other
    enc = nn.TransformerEncoder(layers[0], num_layers=len(layers), norm=norm, enable_nested_tensor=False)
    enc.layers = nn.ModuleList(layers)  # our converted blocks, not clones of the first
    return enc


def _decoder_stack_to_torch(stack: DecoderStack) -> nn.TransformerDecoder:
    layers = _stack_layers_to_torch(stack, decoder_block_to_torch, DecoderBlock)
    norm = _norm_to_torch(stack.final_norm, "DecoderStack.final_norm")
    dec = nn.TransformerDecoder(layers[0], num_layers=len(layers), norm=norm)
    dec.layers = nn.ModuleList(layers)
    return dec


def _seq2seq_to_torch(s: EncoderDecoderStack) -> nn.Transformer:
    enc, dec = _encoder_stack_to_torch(s.encoder), _decoder_stack_to_torch(s.decoder)
    first = enc.layers[0].self_attn
    t = nn.Transformer(
        d_model=first.embed_dim,
        nhead=first.num_heads,
        custom_encoder=nn.Identity(),
        custom_decoder=nn.Identity(),
        batch_first=True,
    )
    t.encoder, t.decoder = enc, dec  # after __init__, whose _reset_parameters would overwrite the copies
    return t


# ---------------------------------------------------------------------------------------------- public

_FROM_TORCH: dict[type[nn.Module], Callable[[Any], nn.Module]] = {
    nn.MultiheadAttention: mha_from_torch,
    nn.TransformerEncoderLayer: encoder_layer_from_torch,
    nn.TransformerDecoderLayer: decoder_layer_from_torch,
    nn.TransformerEncoder: _encoder_from_torch,
    nn.TransformerDecoder: _decoder_from_torch,
    nn.Transformer: _seq2seq_from_torch,
}
_TO_TORCH: dict[type[nn.Module], Callable[[Any], nn.Module]] = {
    MultiHeadAttention: mha_to_torch,
    EncoderBlock: encoder_block_to_torch,
    DecoderBlock: decoder_block_to_torch,
    EncoderStack: _encoder_stack_to_torch,
    DecoderStack: _decoder_stack_to_torch,
    EncoderDecoderStack: _seq2seq_to_torch,
}


def _dispatch(module: nn.Module, table: dict[type[nn.Module], Callable[[Any], nn.Module]], prefix: str) -> nn.Module:
    for cls, fn in table.items():
        if isinstance(module, cls):
            return fn(module).train(module.training)  # same mode as the source
    names = ", ".join(f"{prefix}{cls.__name__}" for cls in table)
    raise TypeError(f"cannot convert {type(module).__name__}; supported: {names}")


def from_torch(module: nn.Module) -> nn.Module:
    """A torch.nn Transformer module → ours, with copied weights (see the module docstring's key tables)."""
    return _dispatch(module, _FROM_TORCH, "nn.")


def to_torch(module: nn.Module) -> nn.Module:
    """One of our modules → the torch.nn equivalent (``batch_first=True``), with copied weights.

    Raises ``ValueError`` naming the reason when ours cannot be expressed in torch.nn: GQA, a positional
    scheme inside attention, RMSNorm, sandwich/deepnorm placement, gated or other activations, a non-default
    attention scale, bias on some parts only, or blocks of one stack that differ.
    """
    return _dispatch(module, _TO_TORCH, "")
