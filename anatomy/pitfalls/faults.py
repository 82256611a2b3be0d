"""The post's mistakes as named faults. Each ``apply_*`` changes one *instance* (never a class, never the code of
a component) and returns a function that undoes exactly what it changed."""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial

import torch
from torch import nn

from anatomy.components.add_norm import AddNorm
from anatomy.components.attention import MultiHeadAttention
from anatomy.components.block import DecoderBlock, EncoderBlock
from anatomy.components.embedding import InputEmbeddings
from anatomy.components.norms import TokenBatchNorm
from anatomy.pitfalls.kernels import faulty_attention

Undo = Callable[[], None]


def _set(obj: nn.Module, attr: str, value, undo: list[Undo]) -> None:
    """Shadow ``obj.attr`` on this instance only; the undo restores the previous state exactly."""
    if isinstance(value, nn.Module) or attr in obj._modules:
        old = obj._modules[attr]
        obj._modules[attr] = value
        undo.append(lambda: obj._modules.__setitem__(attr, old))
        return
    had, old = attr in obj.__dict__, obj.__dict__.get(attr)
    object.__setattr__(obj, attr, value)

    def restore():
        if had:
            object.__setattr__(obj, attr, old)
        else:
            del obj.__dict__[attr]

    undo.append(restore)


def _instances(root: nn.Module, cls) -> list[nn.Module]:
    return [m for m in root.modules() if isinstance(m, cls)]


# --- attention ------------------------------------------------------------------------------------------------

def _faulty_attend(attn: MultiHeadAttention, **knobs):
    def attend(q, k, v, *, mask, is_causal, bias, value_bias, need_weights):
        return faulty_attention(
            q, k, v, mask=mask, is_causal=is_causal, scale=attn.scale, bias=bias, value_bias=value_bias,
            dropout_p=attn.dropout if attn.training else 0.0, need_weights=need_weights,
            score_hook=attn.hook_scores, weight_hook=attn.hook_weights, **knobs)
    return attend


def attention_fault(root: nn.Module, undo: list[Undo], *, scale=None, split=None, merge=None,
                    **knobs) -> None:
    for attn in _instances(root, MultiHeadAttention):
        if scale is not None:
            _set(attn, "scale", scale(attn), undo)
        if split is not None:
            _set(attn, "_split", partial(split, attn), undo)
        if merge is not None:
            _set(attn, "_merge", partial(merge, attn), undo)
        if knobs:
            _set(attn, "_attend", _faulty_attend(attn, **knobs), undo)


def split_without_transpose(attn: MultiHeadAttention, x: torch.Tensor, heads: int) -> torch.Tensor:
    b, t, _ = x.shape
    return x.reshape(b, heads, t, attn.head_dim)  # "(B, H, T, Dh)" — but each head now holds a slice of tokens


def merge_without_transpose(attn: MultiHeadAttention, out: torch.Tensor) -> torch.Tensor:
    b, _, t, _ = out.shape
    return out.reshape(b, t, attn.inner_dim)  # "(B, T, D)" — but token t now holds pieces of several tokens


# --- blocks ---------------------------------------------------------------------------------------------------

def _blocks(root: nn.Module) -> list[nn.Module]:
    return _instances(root, (EncoderBlock, DecoderBlock))


def share_norms(root: nn.Module, undo: list[Undo]) -> None:
    for block in _blocks(root):
        first = block.attn_add_norm
        for name in ("cross_add_norm", "ffn_add_norm"):
            an = getattr(block, name, None)
            if an is None:
                continue
            for norm_name in ("norm", "pre_norm", "post_norm"):
                if norm_name in an._modules and norm_name in first._modules:
                    _set(an, norm_name, first._modules[norm_name], undo)


def no_residual(root: nn.Module, undo: list[Undo]) -> None:
    def after(an: AddNorm, x, out):
        out = an.dropout(out)
        if an.placement in ("post", "deepnorm"):
            return an.norm(out)
        return an.post_norm(out) if an.placement == "sandwich" else out

    for an in _instances(root, AddNorm):
        _set(an, "after", partial(after, an), undo)


def norm_on_residual_path(root: nn.Module, undo: list[Undo]) -> None:
    """x = norm(x); x = x + f(x): the residual carries the *normalised* input (the post's §5.2 third bug)."""
    def norm_of(an: AddNorm):
        return an.norm if "norm" in an._modules else an.pre_norm

    for an in _instances(root, AddNorm):
        _set(an, "before", lambda x, an=an: norm_of(an)(x), undo)
        _set(an, "after", lambda x, out, an=an: norm_of(an)(x) + an.dropout(out), undo)


def batchnorm_instead_of_layernorm(root: nn.Module, undo: list[Undo]) -> None:
    for an in _instances(root, AddNorm):
        for name in ("norm", "pre_norm", "post_norm"):
            if name in an._modules:
                old = an._modules[name]
                bn = TokenBatchNorm(old.weight.shape[0]).to(old.weight.device, old.weight.dtype)
                with torch.no_grad():
                    bn.bn.weight.copy_(old.weight)
                    if getattr(old, "bias", None) is not None:
                        bn.bn.bias.copy_(old.bias)
                bn.train(old.training)
                _set(an, name, bn, undo)


# --- model ----------------------------------------------------------------------------------------------------

def large_init_scale(root: nn.Module, undo: list[Undo], *, factor: float = 10.0) -> None:
    """Multiply every attention/FFN Linear weight by ``factor`` (restored exactly on undo)."""
    saved = []
    for attn in _instances(root, MultiHeadAttention):
        for lin in attn.modules():
            if isinstance(lin, nn.Linear):
                saved.append((lin.weight, lin.weight.detach().clone()))
    with torch.no_grad():
        for w, _ in saved:
            w.mul_(factor)

    def restore():
        with torch.no_grad():
            for w, original in saved:
                w.copy_(original)

    undo.append(restore)


def no_positional(root: nn.Module, undo: list[Undo]) -> None:
    for emb in _instances(root, InputEmbeddings):
        if emb.positional is not None:
            _set(emb, "positional", None, undo)
    for attn in _instances(root, MultiHeadAttention):
        if attn.positional is not None:
            _set(attn, "positional", None, undo)
    for m in root.modules():
        if getattr(m, "position_bias", None) is not None:
            _set(m, "position_bias", None, undo)


def scale_by(kind: str):
    return (lambda attn: 1.0) if kind == "none" else (lambda attn: 1.0 / math.sqrt(attn.d_model))
