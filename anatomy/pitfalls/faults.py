"""The post's mistakes as named faults. Each ``apply_*`` changes one *instance* (never a class, never the code of
a component) and returns a function that undoes exactly what it changed."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import Any, TypeVar, cast

import torch
from torch import nn

from anatomy.components import kernels, wrapping
from anatomy.components.add_norm import AddNorm
from anatomy.components.attention import MultiHeadAttention
from anatomy.components.block import TransformerBlock
from anatomy.components.context import AttentionContext
from anatomy.components.embedding import InputEmbeddings
from anatomy.components.kernels import AttentionArgs
from anatomy.components.masks import combine
from anatomy.components.norms import TokenBatchNorm

Undo = Callable[[], None]


def _set(obj: nn.Module, attr: str, value: object, undo: list[Undo]) -> None:
    """Shadow ``obj.attr`` on this instance only; the undo restores the previous state exactly."""
    if isinstance(value, nn.Module) or attr in obj._modules:
        old = obj._modules[attr]
        obj._modules[attr] = cast("nn.Module | None", value)  # a module, or None in a module's slot
        undo.append(lambda: obj._modules.__setitem__(attr, old))
        return
    had, old = attr in obj.__dict__, obj.__dict__.get(attr)
    object.__setattr__(obj, attr, value)

    def restore() -> None:
        if had:
            object.__setattr__(obj, attr, old)
        else:
            del obj.__dict__[attr]

    undo.append(restore)


_M = TypeVar("_M", bound=nn.Module)


def _instances(root: nn.Module, cls: type[_M]) -> list[_M]:
    return [m for m in root.modules() if isinstance(m, cls)]


# --- attention ------------------------------------------------------------------------------------------------
# Each attention fault wraps one step of ONE attention module from outside (components/wrapping.py): the split
# (``split_heads``), the merge (``merge_heads``) or the attention itself (``attend``: the scale it is called with,
# or the math kernel with one step changed in place of the module's kernel). Faults of different steps compose; a
# second fault of the same step takes the place of the first until it is undone.

Tensor = torch.Tensor
Attend = Callable[[MultiHeadAttention, Tensor, Tensor, Tensor, AttentionContext, AttentionArgs], kernels.Weights]
# ^ MultiHeadAttention.attend, ``self`` first


def _another_scale(scale_of: Callable[[MultiHeadAttention, float], float]) -> Callable[[Attend], Attend]:
    """``attend`` in place, called with ``scale_of(module, scale)`` instead of ``scale``."""

    def wrap(inner: Attend) -> Attend:
        def scaled(
            self: MultiHeadAttention, q: Tensor, k: Tensor, v: Tensor, ctx: AttentionContext, args: AttentionArgs
        ) -> kernels.Weights:
            return inner(self, q, k, v, ctx, replace(args, scale=scale_of(self, args.scale)))

        return scaled

    return wrap


def _by_sqrt_d_model(attn: MultiHeadAttention, scale: float) -> float:
    return 1.0 / math.sqrt(float(attn.d_model))  # the model's width where the head's Dh was meant


def split_without_transpose(attn: MultiHeadAttention, x: torch.Tensor, heads: int) -> torch.Tensor:
    """A projection ``(B, T, heads·Dh)`` reshaped straight to ``(B, heads, T, Dh)``: each "head" holds a slice of
    tokens."""
    b, t, n = x.shape
    wrong = x.reshape(b, heads, t, n // heads)  # "(B, H, T, Dh)": each head now holds a slice of tokens
    return wrong.transpose(1, 2).contiguous().transpose(1, 2)  # strided as the module's own split: the same kernels


def merge_without_transpose(attn: MultiHeadAttention, out: torch.Tensor) -> torch.Tensor:
    """Heads ``(B, H, T, Dh)`` reshaped straight to ``(B, T, H·Dh)``: output token t holds pieces of several
    tokens."""
    b, h, t, dh = out.shape
    return out.reshape(b, t, h * dh)


MaskOf = Callable[[MultiHeadAttention, AttentionContext, int], tuple["torch.Tensor | None", bool]]
Softmax = Callable[[torch.Tensor, "torch.Tensor | None", torch.dtype], torch.Tensor]


def _folded(attn: MultiHeadAttention, ctx: AttentionContext, s: int) -> tuple[torch.Tensor | None, bool]:
    """The layer's final mask, the causal rule folded in (what the math kernel gets)."""
    return attn.kernel_mask(ctx, s)


def _unfolded(attn: MultiHeadAttention, ctx: AttentionContext, s: int) -> tuple[torch.Tensor | None, bool]:
    """The layer's mask with the causal rule kept apart (``is_causal``), for a fault that builds its own; a
    windowed layer's band holds the causal part."""
    if attn.window(ctx) is not None:
        return attn.kernel_mask(ctx, s)
    return ctx.key_mask(s, attn.n_heads), ctx.is_causal and ctx.t > 1


def _softmax(scores: torch.Tensor, mask: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor:
    return kernels.masked_softmax(scores, mask)


def _softmax_then_zero(scores: torch.Tensor, mask: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor:
    weights = scores.to(torch.promote_types(scores.dtype, torch.float32)).softmax(-1)
    return weights if mask is None else weights * mask  # rows no longer sum to 1


def _fill_no_guard(fill: float) -> Softmax:
    """Fill hidden scores with ``fill`` in the inputs' dtype (-1e9 overflows float16) and softmax, with no guard
    for rows that see no key."""

    def softmax(scores: torch.Tensor, mask: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor:
        compute = torch.promote_types(scores.dtype, torch.float32)
        if mask is None:
            return scores.to(compute).softmax(-1)
        return scores.to(dtype).masked_fill(~mask, fill).to(compute).softmax(-1)

    return softmax


def _mask_on_queries(mask: torch.Tensor | None, is_causal: bool, t: int, s: int, device: torch.device) -> Any:
    if mask is not None and mask.shape[-2] == 1 and s == t:
        mask = mask.transpose(-1, -2)  # (B, 1, T, 1): hides padded *queries*, every key stays visible
    return kernels.full_mask(mask, is_causal, t, s, device)


def _causal_shifted(offset: int) -> Callable[..., torch.Tensor | None]:
    def mask_of(mask: torch.Tensor | None, is_causal: bool, t: int, s: int, device: torch.device) -> Any:
        causal = torch.ones(t, s, dtype=torch.bool, device=device).tril(s - t + offset) if is_causal else None
        return combine(mask, causal)

    return mask_of


def _math_with(
    mask_of: MaskOf = _folded,
    final: Callable[..., torch.Tensor | None] = kernels.full_mask,
    softmax: Softmax = _softmax,
) -> Callable[[Attend], Attend]:
    """``attend`` replaced by the math kernel with one step changed: the mask (``mask_of`` the context, then
    ``final(mask, is_causal, t, s, device)``) or the softmax."""

    def attend(
        self: MultiHeadAttention, q: Tensor, k: Tensor, v: Tensor, ctx: AttentionContext, args: AttentionArgs
    ) -> kernels.Weights:
        t, s = q.shape[-2], k.shape[-2]
        mask = final(*mask_of(self, ctx, s), t, s, q.device)
        k, v = kernels.repeat_kv(k, q.shape[1]), kernels.repeat_kv(v, q.shape[1])  # (B, H, S, Dh)
        scores = kernels.math_scores(
            q, k, scale=args.scale, softcap=self.softcap, bias=args.bias, score_hook=self.hook_scores
        )
        return kernels.weighted_values(
            softmax(scores, mask, q.dtype).to(v.dtype),
            v,
            value_bias=args.value_bias,
            dropout_p=args.dropout_p,
            need_weights=args.need_weights,
            weight_hook=self.hook_weights,
        )

    return lambda inner: attend


# fault name -> (method, step, the wrapper from the fault's parameters[, label: the slot it takes, default the step])
WRAPPERS: dict[str, tuple[Any, ...]] = {
    "no_scaling": ("attend", "change", lambda: _another_scale(lambda attn, scale: 1.0)),
    "scale_by_d_model": ("attend", "change", lambda: _another_scale(_by_sqrt_d_model)),
    "split_without_transpose": ("split_heads", "replace", lambda: lambda inner: split_without_transpose),
    "merge_wrong_transpose": ("merge_heads", "replace", lambda: lambda inner: merge_without_transpose),
    "mask_after_softmax": ("attend", "replace", lambda: _math_with(softmax=_softmax_then_zero)),
    "finite_mask_fill": ("attend", "replace", lambda fill: _math_with(softmax=_fill_no_guard(fill))),
    "inf_fill_no_guard": ("attend", "replace", lambda: _math_with(softmax=_fill_no_guard(float("-inf")))),
    "padding_mask_on_queries": ("attend", "replace", lambda: _math_with(_unfolded, _mask_on_queries)),
    "causal_off_by_one": (
        "attend",
        "replace",
        lambda causal_offset: _math_with(_unfolded, _causal_shifted(causal_offset)),
    ),
}


def attention_fault(root: nn.Module, undo: list[Undo], *, name: str, **params: Any) -> None:
    """Wrap one step of every attention module under ``root`` with fault ``name`` (``WRAPPERS``), on each
    instance."""
    method, step, make, *label = WRAPPERS[name]
    for attn in _instances(root, MultiHeadAttention):
        undo.append(wrapping.wrap_method(attn, method, step, make(**params), *label))


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
    def after(an: AddNorm, x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        out = an.dropout(out)
        if an.placement in ("post", "deepnorm"):
            normed: torch.Tensor = an.norm(out)
            return normed
        if an.placement == "sandwich":
            normed = an.post_norm(out)
            return normed
        return out

    for an in _instances(root, AddNorm):
        _set(an, "after", partial(after, an), undo)


def norm_on_residual_path(root: nn.Module, undo: list[Undo]) -> None:
    """x = norm(x); x = x + f(x): the residual carries the *normalised* input (the post's §5.2 third bug)."""

    def norm_of(an: AddNorm) -> nn.Module:
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

    def restore() -> None:
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


# --- attention: the learners' mistakes of issue 29 ------------------------------------------------------------


def _softmax_over(dim: int) -> Softmax:
    """Fill the hidden scores with -inf and softmax over ``dim`` of (B, H, T, S): 1 runs over the heads, -2 over
    the queries. What every head (or every query) hides gets no weight at all: the learner's code gives NaN there."""

    def softmax(scores: torch.Tensor, mask: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor:
        s = scores.to(torch.promote_types(scores.dtype, torch.float32))
        if mask is not None:
            s = s.masked_fill(~mask, float("-inf"))
        return s.softmax(dim).nan_to_num(0.0)  # a column hidden from every head: no weight rather than NaN

    return softmax


def _scaled_after(inner: Attend) -> Attend:
    """``attend`` in place, unscaled, with its weights (and so its output) multiplied by the scale after."""

    def after(
        self: MultiHeadAttention, q: Tensor, k: Tensor, v: Tensor, ctx: AttentionContext, args: AttentionArgs
    ) -> kernels.Weights:
        out, weights = inner(self, q, k, v, ctx, replace(args, scale=1.0))
        return out * args.scale, (None if weights is None else weights * args.scale)

    return after


def _scale_by_keys(inner: Attend) -> Attend:
    """``attend`` in place scaled by 1/sqrt(S), the key length (``k.size(-1)`` after the transpose)."""

    def by_keys(
        self: MultiHeadAttention, q: Tensor, k: Tensor, v: Tensor, ctx: AttentionContext, args: AttentionArgs
    ) -> kernels.Weights:
        return inner(self, q, k, v, ctx, replace(args, scale=1.0 / math.sqrt(k.shape[-2])))

    return by_keys


def _dropout_always(p: float) -> Callable[[Attend], Attend]:
    """``attend`` in place with dropout ``p`` on its weights whatever the module's mode (``F.dropout(w, p)``)."""

    def wrap(inner: Attend) -> Attend:
        def dropped(
            self: MultiHeadAttention, q: Tensor, k: Tensor, v: Tensor, ctx: AttentionContext, args: AttentionArgs
        ) -> kernels.Weights:
            return inner(self, q, k, v, ctx, replace(args, dropout_p=p))

        return dropped

    return wrap


def heads_interleaved(attn: MultiHeadAttention, x: torch.Tensor, heads: int) -> torch.Tensor:
    """A projection ``(B, T, heads·Dh)`` split into the learner's interleaved heads: ``x.view(B, T, Dh, H)`` puts
    feature ``j·H + h`` in head ``h``, where the post's split gives it ``h·Dh + j``."""
    b, t, n = x.shape
    wrong = x.view(b, t, n // heads, heads).transpose(-1, -2).reshape(b, t, n)
    return wrong.view(b, t, heads, n // heads).transpose(1, 2)  # (B, heads, T, Dh)


# fault name -> (method, step, the wrapper from the fault's parameters, label: the slot it takes)
WRAPPERS.update(
    {
        "softmax_wrong_axis": ("attend", "replace", lambda dim: _math_with(softmax=_softmax_over(dim))),
        "scale_after_softmax": ("attend", "change", lambda: _scaled_after),
        "scale_from_wrong_size": ("attend", "change", lambda: _scale_by_keys),
        "dropout_at_eval": ("attend", "change", lambda p: _dropout_always(p), "dropout"),
        "heads_interleaved": ("split_heads", "replace", lambda: lambda inner: heads_interleaved),
    }
)
