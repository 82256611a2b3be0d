"""The post's mistakes as named faults. Each ``apply_*`` changes one *instance* (never a class, never the code of
a component) and returns a function that undoes exactly what it changed."""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from typing import TypeVar, cast

import torch
from torch import nn

from anatomy.components import kernels
from anatomy.components.add_norm import AddNorm
from anatomy.components.attention import MultiHeadAttention
from anatomy.components.block import TransformerBlock
from anatomy.components.embedding import InputEmbeddings
from anatomy.components.masks import combine
from anatomy.components.norms import TokenBatchNorm

Undo = Callable[[], None]


def _set(obj: nn.Module, attr: str, value, undo: list[Undo]) -> None:
    """Shadow ``obj.attr`` on this instance only; the undo restores the previous state exactly."""
    if isinstance(getattr(type(obj), attr, None), kernels.kernel_setting):  # a registry name: set, then set back
        old_setting = getattr(obj, attr)
        setattr(obj, attr, value)
        undo.append(lambda: setattr(obj, attr, old_setting))
        return
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


_M = TypeVar("_M", bound=nn.Module)


def _instances(root: nn.Module, cls: type[_M]) -> list[_M]:
    return [m for m in root.modules() if isinstance(m, cls)]


# --- attention ------------------------------------------------------------------------------------------------
# Each attention fault is a kernel registry entry: the math kernel with one step changed (the scale, the split,
# the merge, the mask or the softmax). A fault selects its entry by name through the module's public attributes
# (`kernel` for the attending step, `scale_kernel` / `split_kernel` / `merge_kernel` for the others, `kernel_args`
# for its parameters), so faults of different steps compose and two of the same step do not.

def split_without_transpose(attn: MultiHeadAttention, x: torch.Tensor, heads: int) -> torch.Tensor:
    b, t, _ = x.shape
    return x.reshape(b, heads, t, attn.head_dim)  # "(B, H, T, Dh)" — but each head now holds a slice of tokens


def merge_without_transpose(attn: MultiHeadAttention, out: torch.Tensor) -> torch.Tensor:
    b, _, t, _ = out.shape
    return out.reshape(b, t, attn.inner_dim)  # "(B, T, D)" — but token t now holds pieces of several tokens


def _softmax_then_zero(scores: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    weights = scores.to(torch.promote_types(scores.dtype, torch.float32)).softmax(-1)
    return weights if mask is None else weights * mask  # rows no longer sum to 1


def _fill_no_guard(scores: torch.Tensor, mask: torch.Tensor | None, *, fill: float, dtype: torch.dtype):
    """Fill hidden scores with ``fill`` in the inputs' dtype (-1e9 overflows float16) and softmax, with no guard
    for rows that see no key."""
    compute = torch.promote_types(scores.dtype, torch.float32)
    if mask is None:
        return scores.to(compute).softmax(-1)
    return scores.to(dtype).masked_fill(~mask, fill).to(compute).softmax(-1)


def _mask_on_queries(mask, is_causal, t, s, device):
    if mask is not None and mask.shape[-2] == 1 and s == t:
        mask = mask.transpose(-1, -2)  # (B, 1, T, 1): hides padded *queries*, every key stays visible
    return kernels.full_mask(mask, is_causal, t, s, device)


def _finite_fill(q, k, v, *, fill: float = float("-inf"), **kw):
    return kernels.math_attention(q, k, v, softmax_step=partial(_fill_no_guard, fill=fill, dtype=q.dtype), **kw)


def _causal_shifted(q, k, v, *, causal_offset: int = 0, **kw):
    def mask_step(mask, is_causal, t, s, device):
        causal = torch.ones(t, s, dtype=torch.bool, device=device).tril(s - t + causal_offset) if is_causal else None
        return combine(mask, causal)

    return kernels.math_attention(q, k, v, mask_step=mask_step, **kw)


_math = partial(kernels.Kernel, fn=kernels.math_attention, returns_weights=True, supports_value_bias=True)
for _entry in (
    _math(name="no_scaling", scale=lambda attn: 1.0),
    _math(name="scale_by_d_model", scale=lambda attn: 1.0 / math.sqrt(attn.d_model)),
    _math(name="split_without_transpose", split=split_without_transpose),
    _math(name="merge_wrong_transpose", merge=merge_without_transpose),
    _math(name="mask_after_softmax", fn=partial(kernels.math_attention, softmax_step=_softmax_then_zero)),
    _math(name="finite_mask_fill", fn=_finite_fill),
    _math(name="inf_fill_no_guard", fn=_finite_fill),
    _math(name="padding_mask_on_queries", fn=partial(kernels.math_attention, mask_step=_mask_on_queries),
          fold_causal=False),
    _math(name="causal_off_by_one", fn=_causal_shifted, fold_causal=False),
):
    kernels.register(_entry)


def attention_fault(root: nn.Module, undo: list[Undo], *, step: str, name: str, **args) -> None:
    """Select entry ``name`` for ``step`` (``kernel``, ``scale_kernel``, ``split_kernel``, ``merge_kernel``) on
    every attention module under ``root``; the attending step also takes the fault's parameters."""
    for attn in _instances(root, MultiHeadAttention):
        _set(attn, step, name, undo)
        if step == "kernel":
            _set(attn, "kernel_args", args, undo)


# --- blocks ---------------------------------------------------------------------------------------------------

def _blocks(root: nn.Module) -> list[TransformerBlock]:
    return _instances(root, TransformerBlock)


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
                assert old is not None  # an AddNorm's norms are modules, never None
                weight = cast(torch.Tensor, old.weight)  # a norm's (D,) scale
                bn = TokenBatchNorm(weight.shape[0]).to(weight.device, weight.dtype)
                with torch.no_grad():
                    bn.bn.weight.copy_(weight)
                    if getattr(old, "bias", None) is not None:
                        bn.bn.bias.copy_(cast(torch.Tensor, old.bias))
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
