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
``anatomy.components.masks.from_torch_nn`` / ``to_torch_nn`` flip them. Our blocks take one combined attention
mask; the stacks take the key-padding mask ``(B, S)`` and the attention mask apart, as torch does. With
``kp = key_padding_to_attention`` and ``flip = from_torch_nn`` (both from ``anatomy.components.masks``)::

    torch  mha(x, c, c, key_padding_mask=kpm, attn_mask=am)
    ours   attn(x, context=c, mask=combine(kp(flip(kpm)), flip(am)))       # context=None for self-attention
    torch  enc_layer(x, src_mask=am, src_key_padding_mask=kpm)
    ours   block(x, mask=combine(kp(flip(kpm)), flip(am)))
    torch  dec_layer(y, mem, tgt_mask=causal, tgt_key_padding_mask=tkpm, memory_key_padding_mask=mkpm)
    ours   block(y, mem, mask=kp(flip(tkpm)), memory_mask=kp(flip(mkpm)), is_causal=True)
    torch  encoder(x, mask=am, src_key_padding_mask=kpm)
    ours   stack(x, key_padding_mask=flip(kpm), attn_mask=flip(am))
    torch  transformer(x, y, tgt_mask=causal, src_key_padding_mask=skpm, tgt_key_padding_mask=tkpm,
                       memory_key_padding_mask=mkpm)
    ours   stack(x, y, src_key_padding_mask=flip(skpm), tgt_key_padding_mask=flip(tkpm),
                 memory_key_padding_mask=flip(mkpm), tgt_is_causal=True)

Ours reads keys and values from one tensor (``context``), so a torch call with ``key is not value`` has no
equivalent call. A torch 3-D ``attn_mask`` is ``(B*H, T, S)``: view it as ``(B, H, T, S)`` before flipping.
A query row that may attend to nothing gives NaN in some torch paths; ours gives weights 0 and a zero
attention output (so ``o_proj``'s bias alone). In eval mode torch's nested-tensor fast path writes zeros at
padded positions; ``to_torch`` builds ``nn.TransformerEncoder(enable_nested_tensor=False)``, so every position
matches (compare real tokens only when the torch side came with nested tensors on).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from anatomy.components.add_norm import AddNorm
from anatomy.components.attention import MultiHeadAttention
from anatomy.components.block import DecoderBlock, EncoderBlock
from anatomy.components.ffn import FeedForward
from anatomy.components.norms import LayerNorm
from anatomy.models.decoder import DecoderStack
from anatomy.models.encoder import EncoderStack
from anatomy.models.seq2seq import EncoderDecoderStack

__all__ = ["DECODER_LAYER_KEYS", "ENCODER_LAYER_KEYS", "from_torch", "to_torch"]

ENCODER_LAYER_KEYS = (
    ("self_attn", "attn"), ("linear1", "ffn.up_proj"), ("linear2", "ffn.down_proj"),
    ("norm1", "attn_add_norm.norm"), ("norm2", "ffn_add_norm.norm"),
    ("dropout1", "attn_add_norm.dropout"), ("dropout", "ffn.dropout"), ("dropout2", "ffn_add_norm.dropout"),
)
DECODER_LAYER_KEYS = (
    ("self_attn", "attn"), ("multihead_attn", "cross_attn"), ("linear1", "ffn.up_proj"),
    ("linear2", "ffn.down_proj"), ("norm1", "attn_add_norm.norm"), ("norm2", "cross_add_norm.norm"),
    ("norm3", "ffn_add_norm.norm"), ("dropout1", "attn_add_norm.dropout"),
    ("dropout2", "cross_add_norm.dropout"), ("dropout", "ffn.dropout"), ("dropout3", "ffn_add_norm.dropout"),
)
_ACTIVATIONS = ("relu", "gelu")


# ---------------------------------------------------------------------------------------------- small helpers

def _like(module: nn.Module) -> dict:
    """``device`` and ``dtype`` of the module's first parameter (empty when it has none)."""
    p = next(module.parameters(), None)
    return {} if p is None else {"device": p.device, "dtype": p.dtype}


def _copy(dst: torch.Tensor | None, src: torch.Tensor | None, where: str) -> None:
    """Copy ``src`` into ``dst`` in place (never aliasing); both ``None`` is fine, one ``None`` is not."""
    if (dst is None) != (src is None):
        raise ValueError(f"{where}: present on one side only")
    if dst is None:
        return
    if dst.shape != src.shape:
        raise ValueError(f"{where}: shape {tuple(src.shape)} does not fit {tuple(dst.shape)}")
    with torch.no_grad():
        dst.copy_(src)


def _one_bias(where: str, present: list[bool]) -> bool:
    if len(set(present)) != 1:
        raise ValueError(f"{where} has bias on some projections or norms and not on others; torch.nn's bias= "
                         "switches the Linear and LayerNorm biases together, and so does ours")
    return present[0]


def _expect(module: object, cls: type, where: str) -> None:
    if not isinstance(module, cls):
        raise TypeError(f"{where} must be {cls.__module__}.{cls.__name__}, got {type(module).__name__}")


def _activation_name(act: object) -> str:
    """torch layer's ``activation`` (function or module) → our activation name."""
    if act is F.relu or isinstance(act, nn.ReLU):
        return "relu"
    if act is F.gelu or (isinstance(act, nn.GELU) and act.approximate == "none"):
        return "gelu"
    raise ValueError(f"unsupported activation {act!r}: only relu and gelu convert "
                     "(F.relu, F.gelu, nn.ReLU(), nn.GELU(), or the strings 'relu' / 'gelu')")


# ---------------------------------------------------------------------------------------------- attention

def _check_torch_mha(m: nn.MultiheadAttention, where: str) -> bool:
    """Refuse what our attention cannot express; return whether it has biases."""
    d = m.embed_dim
    if m.kdim != d or m.vdim != d:
        raise ValueError(f"{where}: kdim={m.kdim}, vdim={m.vdim} differ from embed_dim={d}; our "
                         "MultiHeadAttention needs kdim == vdim == d_model")
    if m.bias_k is not None:
        raise ValueError(f"{where}: add_bias_kv=True is not supported (ours has no learned extra key/value)")
    if m.add_zero_attn:
        raise ValueError(f"{where}: add_zero_attn=True is not supported (our attention adds no zero key)")
    return _one_bias(where, [m.in_proj_bias is not None, m.out_proj.bias is not None])


def _check_ours_mha(a: MultiHeadAttention, where: str) -> bool:
    """Refuse what nn.MultiheadAttention cannot express; return whether it has biases."""
    if a.n_kv_heads != a.n_heads:
        raise ValueError(f"{where}: grouped-query attention (GQA, n_kv_heads={a.n_kv_heads} != "
                         f"n_heads={a.n_heads}) has no nn.MultiheadAttention equivalent")
    if a.inner_dim != a.d_model:
        raise ValueError(f"{where}: heads of width head_dim={a.head_dim} (n_heads * head_dim = {a.inner_dim} != "
                         f"d_model = {a.d_model}) have no nn.MultiheadAttention equivalent: its heads split d_model")
    if a.sliding_window is not None:
        raise ValueError(f"{where}: sliding-window attention (sliding_window={a.sliding_window}) has no "
                         "nn.MultiheadAttention equivalent")
    if a.qk_norm is not None:
        raise ValueError(f"{where}: QK-norm (qk_norm={a.qk_norm!r}) has no nn.MultiheadAttention equivalent")
    if a.positional is not None:
        raise ValueError(f"{where}: a positional scheme inside attention ({type(a.positional).__name__}) has "
                         "no nn.MultiheadAttention equivalent")
    default = 1.0 / math.sqrt(a.head_dim)
    if not math.isclose(a.scale, default, rel_tol=1e-9):
        raise ValueError(f"{where}: non-default attention scale {a.scale:.6g}; nn.MultiheadAttention always "
                         f"uses 1/sqrt(Dh) = {default:.6g}")
    projs = [a.qkv_proj, a.o_proj] if a.fused_qkv else [a.q_proj, a.k_proj, a.v_proj, a.o_proj]
    return _one_bias(where, [p.bias is not None for p in projs])


def _ours_qkv(a: MultiHeadAttention) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Our q/k/v projections as torch's fused ``in_proj``: weight ``(3D, D)``, bias ``(3D,)`` or ``None``."""
    if a.fused_qkv:
        return a.qkv_proj.weight, a.qkv_proj.bias
    projs = (a.q_proj, a.k_proj, a.v_proj)
    w = torch.cat([p.weight for p in projs])  # (3D, D)
    b = None if projs[0].bias is None else torch.cat([p.bias for p in projs])  # (3D,)
    return w, b


def _mha_into_ours(a: MultiHeadAttention, m: nn.MultiheadAttention) -> None:
    if m.in_proj_weight is not None:
        ws = m.in_proj_weight.chunk(3)  # 3 x (D, D)
    else:
        ws = (m.q_proj_weight, m.k_proj_weight, m.v_proj_weight)  # 3 x (D, D)
    bs = (None,) * 3 if m.in_proj_bias is None else m.in_proj_bias.chunk(3)  # 3 x (D,)
    if a.fused_qkv:
        _copy(a.qkv_proj.weight, torch.cat(ws), "qkv_proj.weight")  # (3D, D)
        _copy(a.qkv_proj.bias, None if bs[0] is None else torch.cat(bs), "qkv_proj.bias")  # (3D,)
    else:
        for name, w, b in zip(("q_proj", "k_proj", "v_proj"), ws, bs, strict=True):
            _copy(getattr(a, name).weight, w, f"{name}.weight")
            _copy(getattr(a, name).bias, b, f"{name}.bias")
    _copy(a.o_proj.weight, m.out_proj.weight, "o_proj.weight")
    _copy(a.o_proj.bias, m.out_proj.bias, "o_proj.bias")
    a.dropout = m.dropout


def _mha_into_torch(m: nn.MultiheadAttention, a: MultiHeadAttention) -> None:
    w, b = _ours_qkv(a)
    _copy(m.in_proj_weight, w, "in_proj_weight")
    _copy(m.in_proj_bias, b, "in_proj_bias")
    _copy(m.out_proj.weight, a.o_proj.weight, "out_proj.weight")
    _copy(m.out_proj.bias, a.o_proj.bias, "out_proj.bias")
    m.dropout = a.dropout


def _mha_from_torch(m: nn.MultiheadAttention) -> MultiHeadAttention:
    bias = _check_torch_mha(m, "nn.MultiheadAttention")
    a = MultiHeadAttention(d_model=m.embed_dim, n_heads=m.num_heads, bias=bias, dropout=m.dropout,
                           kernel="auto")
    _mha_into_ours(a.to(**_like(m)), m)
    return a


def _mha_to_torch(a: MultiHeadAttention) -> nn.MultiheadAttention:
    bias = _check_ours_mha(a, "MultiHeadAttention")
    m = nn.MultiheadAttention(a.d_model, a.n_heads, dropout=a.dropout, bias=bias, batch_first=True,
                              **_like(a))
    _mha_into_torch(m, a)
    return m


# ---------------------------------------------------------------------------------------------- layers

def _transfer(layer: nn.Module, block: nn.Module, keys: tuple, *, to_ours: bool) -> None:
    """Copy every ``(torch name, our name)`` pair of ``keys`` from one side to the other."""
    for torch_name, our_name in keys:
        t, o = layer.get_submodule(torch_name), block.get_submodule(our_name)
        src, dst = (t, o) if to_ours else (o, t)
        where = f"{torch_name} / {our_name}"
        if isinstance(t, nn.MultiheadAttention) and to_ours:
            _mha_into_ours(o, t)
        elif isinstance(t, nn.MultiheadAttention):
            _mha_into_torch(t, o)
        elif isinstance(t, nn.Dropout):
            dst.p = src.p
        else:  # nn.Linear or a LayerNorm: weight, bias (and eps) on both sides
            if getattr(t, "weight", True) is not None:  # nn.LayerNorm(elementwise_affine=False): ours stays 1
                _copy(dst.weight, src.weight, f"{where}.weight")
            _copy(dst.bias, src.bias, f"{where}.bias")
            if hasattr(src, "eps"):
                dst.eps = src.eps


def _check_torch_norm(norm: object, d_model: int, where: str) -> nn.LayerNorm:
    if not isinstance(norm, nn.LayerNorm):
        raise ValueError(f"{where}: {type(norm).__name__} is not an nn.LayerNorm and cannot convert")
    if tuple(norm.normalized_shape) != (d_model,):
        raise ValueError(f"{where}: LayerNorm over {tuple(norm.normalized_shape)}, expected ({d_model},)")
    return norm


def _block_kwargs_from_torch(layer: nn.Module, attns: list, norms: list) -> dict:
    """``EncoderBlock.build`` / ``DecoderBlock.build`` arguments for a torch layer (after checking it)."""
    where = type(layer).__name__
    d = attns[0].embed_dim
    biases = [_check_torch_mha(m, where) for m in attns]
    biases += [_check_torch_norm(n, d, where).bias is not None for n in norms]
    biases += [layer.linear1.bias is not None, layer.linear2.bias is not None]
    return dict(d_model=d, n_heads=attns[0].num_heads, d_ff=layer.linear1.out_features,
                activation=_activation_name(layer.activation), norm="layernorm", norm_eps=norms[0].eps,
                placement="pre" if layer.norm_first else "post", bias=_one_bias(where, biases),
                dropout=layer.dropout1.p, attention_dropout=attns[0].dropout, kernel="auto")


def _encoder_layer_from_torch(layer: nn.TransformerEncoderLayer) -> EncoderBlock:
    _expect(layer, nn.TransformerEncoderLayer, "encoder layer")
    kw = _block_kwargs_from_torch(layer, [layer.self_attn], [layer.norm1, layer.norm2])
    block = EncoderBlock.build(**kw).to(**_like(layer))
    _transfer(layer, block, ENCODER_LAYER_KEYS, to_ours=True)
    return block


def _decoder_layer_from_torch(layer: nn.TransformerDecoderLayer) -> DecoderBlock:
    _expect(layer, nn.TransformerDecoderLayer, "decoder layer")
    kw = _block_kwargs_from_torch(layer, [layer.self_attn, layer.multihead_attn],
                                  [layer.norm1, layer.norm2, layer.norm3])
    block = DecoderBlock.build(**kw).to(**_like(layer))
    _transfer(layer, block, DECODER_LAYER_KEYS, to_ours=True)
    return block


def _check_ours_norm(norm: object, where: str) -> nn.Module:
    if not isinstance(norm, (LayerNorm, nn.LayerNorm)):
        raise ValueError(f"{where}: {type(norm).__name__} has no torch.nn Transformer equivalent "
                         "(torch.nn's layers use LayerNorm)")
    return norm


def _layer_kwargs_to_torch(block: nn.Module, attns: list, add_norms: list[AddNorm]) -> dict:
    """``nn.TransformerEncoderLayer`` / ``nn.TransformerDecoderLayer`` arguments for our block (checked)."""
    where = type(block).__name__
    placements = sorted({a.placement for a in add_norms})
    if placements not in (["post"], ["pre"]):
        raise ValueError(f"{where}: norm placement {', '.join(placements)} has no torch.nn equivalent "
                         "(only 'post', norm_first=False, and 'pre', norm_first=True)")
    ffn = block.ffn
    activation = getattr(ffn, "activation", type(ffn).__name__)
    if not isinstance(ffn, FeedForward) or activation not in _ACTIVATIONS:
        raise ValueError(f"{where}: activation {activation!r} has no torch.nn equivalent (only relu and "
                         "gelu; gated FFNs such as swiglu have a third matrix)")
    norms = [_check_ours_norm(a.norm, where) for a in add_norms]
    biases = [_check_ours_mha(a, where) for a in attns] + [n.bias is not None for n in norms]
    biases += [ffn.up_proj.bias is not None, ffn.down_proj.bias is not None]
    return dict(d_model=attns[0].d_model, nhead=attns[0].n_heads, dim_feedforward=ffn.d_ff,
                dropout=add_norms[0].dropout.p, activation=activation, layer_norm_eps=norms[0].eps,
                norm_first=placements == ["pre"], bias=_one_bias(where, biases))


def _encoder_block_to_torch(block: EncoderBlock) -> nn.TransformerEncoderLayer:
    kw = _layer_kwargs_to_torch(block, [block.attn], [block.attn_add_norm, block.ffn_add_norm])
    layer = nn.TransformerEncoderLayer(**kw, batch_first=True, **_like(block))
    _transfer(layer, block, ENCODER_LAYER_KEYS, to_ours=False)
    return layer


def _decoder_block_to_torch(block: DecoderBlock) -> nn.TransformerDecoderLayer:
    kw = _layer_kwargs_to_torch(block, [block.attn, block.cross_attn],
                                [block.attn_add_norm, block.cross_add_norm, block.ffn_add_norm])
    layer = nn.TransformerDecoderLayer(**kw, batch_first=True, **_like(block))
    _transfer(layer, block, DECODER_LAYER_KEYS, to_ours=False)
    return layer


# ---------------------------------------------------------------------------------------------- stacks

def _norm_from_torch(norm: nn.Module | None, d_model: int, where: str) -> LayerNorm | None:
    if norm is None:
        return None
    _check_torch_norm(norm, d_model, where)
    ours = LayerNorm(d_model, eps=norm.eps, bias=norm.bias is not None).to(**_like(norm))
    _transfer(norm, ours, (("", ""),), to_ours=True)
    return ours


def _norm_to_torch(norm: nn.Module | None, where: str) -> nn.LayerNorm | None:
    if norm is None:
        return None
    _check_ours_norm(norm, where)
    out = nn.LayerNorm(norm.weight.shape[0], eps=norm.eps, bias=norm.bias is not None, **_like(norm))
    _transfer(out, norm, (("", ""),), to_ours=False)
    return out


def _stack_from_torch(stack: nn.Module, torch_cls: type, layer_fn, cls: type) -> nn.Module:
    _expect(stack, torch_cls, torch_cls.__name__)
    if not len(stack.layers):
        raise ValueError(f"{torch_cls.__name__} has no layers; nothing to take d_model from")
    blocks = [layer_fn(layer) for layer in stack.layers]
    norm = _norm_from_torch(stack.norm, blocks[0].attn.d_model, f"{torch_cls.__name__}.norm")
    return cls(blocks=blocks, final_norm=norm)


def _encoder_from_torch(stack: nn.TransformerEncoder) -> EncoderStack:
    return _stack_from_torch(stack, nn.TransformerEncoder, _encoder_layer_from_torch, EncoderStack)


def _decoder_from_torch(stack: nn.TransformerDecoder) -> DecoderStack:
    return _stack_from_torch(stack, nn.TransformerDecoder, _decoder_layer_from_torch, DecoderStack)


def _seq2seq_from_torch(t: nn.Transformer) -> EncoderDecoderStack:
    return EncoderDecoderStack(encoder=_encoder_from_torch(t.encoder), decoder=_decoder_from_torch(t.decoder))


def _stack_layers_to_torch(stack: nn.Module, block_fn, block_cls: type) -> list[nn.Module]:
    """Convert each block, refusing a stack whose blocks differ (torch.nn's stacks clone one layer)."""
    where = type(stack).__name__
    if stack.position_bias is not None:
        raise ValueError(f"{where}: a shared score bias ({type(stack.position_bias).__name__}) has no "
                         "torch.nn equivalent")
    if not len(stack.blocks):
        raise ValueError(f"{where} has no blocks; torch.nn needs at least one layer to take its shape from")
    layers = []
    for i, block in enumerate(stack.blocks):
        _expect(block, block_cls, f"{where}.blocks[{i}]")
        layers.append(block_fn(block))
    _check_same_config(layers, where)
    return layers


def _layer_config(layer: nn.Module) -> dict:
    """What torch.nn's layer constructor fixes; the blocks of one stack must agree on it."""
    attn, ffn = layer.self_attn, layer.linear1
    return {"d_model": attn.embed_dim, "nhead": attn.num_heads, "dim_feedforward": ffn.out_features,
            "activation": _activation_name(layer.activation), "norm_first": layer.norm_first,
            "bias": ffn.bias is not None, "layer_norm_eps": layer.norm1.eps, "dropout": layer.dropout1.p}


def _check_same_config(layers: list[nn.Module], where: str) -> None:
    first = _layer_config(layers[0])
    for i, layer in enumerate(layers[1:], start=1):
        diff = {k: (first[k], v) for k, v in _layer_config(layer).items() if first[k] != v}
        if diff:
            said = ", ".join(f"{k} ({a!r} vs {b!r})" for k, (a, b) in diff.items())
            raise ValueError(f"{where}: block {i} differs from block 0 in {said}; torch.nn's stacks clone "
                             "one layer config")


def _encoder_stack_to_torch(stack: EncoderStack) -> nn.TransformerEncoder:
    layers = _stack_layers_to_torch(stack, _encoder_block_to_torch, EncoderBlock)
    norm = _norm_to_torch(stack.final_norm, "EncoderStack.final_norm")
    # no nested tensors: they would write zeros at padded positions, where ours computes them like any other
    enc = nn.TransformerEncoder(layers[0], num_layers=len(layers), norm=norm, enable_nested_tensor=False)
    enc.layers = nn.ModuleList(layers)  # our converted blocks, not clones of the first
    return enc


def _decoder_stack_to_torch(stack: DecoderStack) -> nn.TransformerDecoder:
    layers = _stack_layers_to_torch(stack, _decoder_block_to_torch, DecoderBlock)
    norm = _norm_to_torch(stack.final_norm, "DecoderStack.final_norm")
    dec = nn.TransformerDecoder(layers[0], num_layers=len(layers), norm=norm)
    dec.layers = nn.ModuleList(layers)
    return dec


def _seq2seq_to_torch(s: EncoderDecoderStack) -> nn.Transformer:
    enc, dec = _encoder_stack_to_torch(s.encoder), _decoder_stack_to_torch(s.decoder)
    first = enc.layers[0].self_attn
    t = nn.Transformer(d_model=first.embed_dim, nhead=first.num_heads, custom_encoder=nn.Identity(),
                       custom_decoder=nn.Identity(), batch_first=True)
    t.encoder, t.decoder = enc, dec  # after __init__, whose _reset_parameters would overwrite the copies
    return t


# ---------------------------------------------------------------------------------------------- public

_FROM_TORCH = {
    nn.MultiheadAttention: _mha_from_torch,
    nn.TransformerEncoderLayer: _encoder_layer_from_torch,
    nn.TransformerDecoderLayer: _decoder_layer_from_torch,
    nn.TransformerEncoder: _encoder_from_torch,
    nn.TransformerDecoder: _decoder_from_torch,
    nn.Transformer: _seq2seq_from_torch,
}
_TO_TORCH = {
    MultiHeadAttention: _mha_to_torch,
    EncoderBlock: _encoder_block_to_torch,
    DecoderBlock: _decoder_block_to_torch,
    EncoderStack: _encoder_stack_to_torch,
    DecoderStack: _decoder_stack_to_torch,
    EncoderDecoderStack: _seq2seq_to_torch,
}


def _dispatch(module: object, table: dict, prefix: str):
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
